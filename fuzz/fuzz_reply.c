/* fuzz_reply.c — libFuzzer target over what Redis (or anything posing as
 * it) sends back: arbitrary RESP bytes, parsed by hiredis's reader in
 * pieces of any size (a reply cut at every byte boundary), then handed to
 * the parser that reads that kind of reply. The input is
 *   byte 0: which parser (below)
 *   byte 1: the check's shape (algorithms and number of limits)
 *   byte 2: the size of the pieces fed to the reader (0: all at once)
 *   then the bytes Redis "sent".
 * Every reply gets exactly one answer: a status in range, a decision only
 * with PORTEIRO_OK, and a decision that is one (each limit's numbers in
 * their ranges); anything else is an error status, never a crash.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_reply
 *   build-fuzz/fuzz_reply -max_total_time=60 fuzz/corpus/reply */
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "core/leases.h"
#include "redis/batch.h"
#include "redis/command.h"
#include "topology/sentinel_watch.h"
#include "topology/slots.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { P_DECISION, P_BATCH, P_SHARDS, P_SLOTS, P_INFO, P_LEASE, P_SWITCH, P_COUNT };

static const porteiro_algorithm algs[] = {PORTEIRO_FIXED_WINDOW, PORTEIRO_TOKEN_BUCKET,
                                          PORTEIRO_GCRA, PORTEIRO_SLIDING_WINDOW,
                                          PORTEIRO_SLIDING_LOG};

/* A valid call: 1 to 4 limits of the algorithms shape picks. */
static void make_call(pt_call *call, uint8_t shape, int64_t cost) {
    porteiro_limit limits[4];
    size_t n = 1 + (shape >> 6);
    for (size_t i = 0; i < n; i++)
        limits[i] = (porteiro_limit){algs[(shape + i * 3) % 5], 10 + (int64_t)i, 1000, 0};
    char err[128];
    if (pt_call_prepare(call, "fz", 2, limits, n, "k", 1, cost, PORTEIRO_NOW, err, sizeof(err)) !=
        PORTEIRO_OK)
        abort();
}

static void check_status(porteiro_status st) {
    if ((st < PORTEIRO_OK || st > PORTEIRO_ERR_PERMISSION) && st != PT_BATCH_NOT_HERE)
        abort();
}

/* A decision the parser accepted must be one. */
static void check_decision(const porteiro_decision *d, const pt_call *call) {
    if (d->nlimits != call->nlimits)
        abort();
    for (size_t i = 0; i < d->nlimits; i++) {
        const porteiro_result *r = &d->limits[i];
        if (r->remaining < 0 || r->reset_ms < 0 || r->retry_after_ms < -1 ||
            (r->allowed && r->retry_after_ms != 0))
            abort();
    }
    if (d->remaining < 0 || d->retry_after_ms < -1)
        abort();
}

static int add_node(void *ctx, const char *host, size_t hostlen, int port) {
    (void)hostlen;
    int *count = ctx;
    if (host == NULL || port <= 0 || port > 65535)
        abort(); /* the parser must not hand on what is not an address */
    return *count < 8 ? (*count)++ : -1;
}

static void parse_one(uint8_t which, uint8_t shape, redisReply *reply) {
    char err[256];
    err[0] = '\0';
    pt_call calls[8];
    porteiro_decision ds[8];
    switch (which) {
        case P_DECISION: {
            make_call(&calls[0], shape, shape & 1);
            porteiro_status st = pt_reply_decision(reply, &calls[0], &ds[0], err, sizeof(err));
            check_status(st);
            if (st == PORTEIRO_OK)
                check_decision(&ds[0], &calls[0]);
            (void)pt_reply_error_status(reply);
            break;
        }
        case P_BATCH: {
            /* One script serves a batch: its checks share a shape, as
             * pt_batch_take groups them. */
            size_t n = 1 + (shape & 7);
            const pt_call *ptrs[8];
            porteiro_status sts[8];
            for (size_t i = 0; i < n; i++) {
                make_call(&calls[i], shape, 1);
                ptrs[i] = &calls[i];
                sts[i] = (porteiro_status)-1; /* "not answered" */
            }
            porteiro_status all = pt_batch_reply(reply, ptrs, n, ds, sts, err, sizeof(err));
            check_status(all);
            if (all == PORTEIRO_OK)
                for (size_t i = 0; i < n; i++) { /* each check answered once */
                    if (sts[i] == (porteiro_status)-1)
                        abort();
                    check_status(sts[i]);
                    if (sts[i] == PORTEIRO_OK)
                        check_decision(&ds[i], &calls[i]);
                }
            break;
        }
        case P_SHARDS:
        case P_SLOTS: {
            static int16_t owner[PT_SLOTS];
            int count = 0;
            int rc = which == P_SHARDS ? pt_slots_from_shards(reply, owner, add_node, &count)
                                       : pt_slots_from_slots(reply, owner, add_node, &count);
            if (rc == 0)
                for (int s = 0; s < PT_SLOTS; s++)
                    if (owner[s] < -1 || owner[s] >= count)
                        abort();
            break;
        }
        case P_INFO: {
            char policy[64];
            int risk = pt_info_eviction_risk(reply, policy, sizeof(policy));
            if (risk < -1 || risk > 1 || memchr(policy, '\0', sizeof(policy)) == NULL)
                abort();
            break;
        }
        case P_LEASE: {
            pt_lease_op op;
            memset(&op, 0, sizeof(op));
            op.kind = (pt_lease_kind)(shape % 3);
            op.limit = 5;
            op.lease_ms = 1000;
            op.now_ms = PORTEIRO_NOW;
            pt_lease_out out;
            check_status(pt_reply_lease(reply, &op, &out, err, sizeof(err)));
            break;
        }
        default: break;
    }
    if (memchr(err, '\0', sizeof(err)) == NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3)
        return 0;
    uint8_t which = data[0] % P_COUNT, shape = data[1], piece = data[2];
    data += 3;
    size -= 3;
    if (which == P_SWITCH) { /* a pub/sub message's text, not RESP */
        char host[256];
        int port = -1;
        if (pt_sentinel_switch_parse((const char *)data, size, "mymaster", host, sizeof(host),
                                     &port) &&
            (port <= 0 || port > 65535 || memchr(host, '\0', sizeof(host)) == NULL))
            abort();
        return 0;
    }
    redisReader *r = redisReaderCreate();
    if (r == NULL)
        return 0;
    pt_reader_bound(r); /* as every reader of porteiro's */
    size_t step = piece == 0 ? size : piece;
    for (size_t at = 0; at < size; at += step) {
        size_t len = size - at < step ? size - at : step;
        if (redisReaderFeed(r, (const char *)data + at, len) != REDIS_OK)
            break;
        for (;;) { /* every reply complete so far */
            void *reply = NULL;
            if (redisReaderGetReply(r, &reply) != REDIS_OK || reply == NULL)
                break;
            parse_one(which, shape, reply);
            freeReplyObject(reply);
        }
        if (r->err)
            break;
    }
    redisReaderFree(r);
    return 0;
}
