/* top.c — a handle's top keys: one core/topkeys.c structure per name (a
 * policy, an envoy rule), created at the name's first decision. Fed under
 * the set's own mutex (the decision path holds p->mu or runs on the loop;
 * a reader on another thread takes only this one), so reading never
 * waits for Redis. */
#include "limiter/top.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/topkeys.h"
#include "limiter/handle.h"

struct pt_topset {
    pthread_mutex_t mu;
    size_t k;
    /* Only grows, and a name's place never changes: found without the
     * lock (a name is written before nnames counts it). */
    _Atomic size_t nnames;
    struct {
        char name[PORTEIRO_TOP_NAME_MAX + 1];
        size_t len;
        pt_topkeys *keys;
        /* The units its settles reported used (porteiro_settle*: the
         * tokens view, PORTEIRO_TOP_USED), made at its first settle. */
        pt_topkeys *used;
    } names[PORTEIRO_TOP_MAX_NAMES];
};

pt_topset *pt_topset_new(size_t k) {
    if (k < PT_TOP_MIN_K || k > PT_TOP_MAX_K)
        return NULL;
    pt_topset *ts = calloc(1, sizeof(*ts));
    if (ts == NULL)
        return NULL;
    pthread_mutex_init(&ts->mu, NULL);
    ts->k = k;
    return ts;
}

void pt_topset_free(pt_topset *ts) {
    if (ts == NULL)
        return;
    for (size_t i = 0; i < ts->nnames; i++) {
        pt_topkeys_free(ts->names[i].keys);
        pt_topkeys_free(ts->names[i].used);
    }
    pthread_mutex_destroy(&ts->mu);
    free(ts);
}

/* The name's place + 1, adding it when new; 0 when the set is full, the
 * name too long or memory short (that name is then not counted). */
static uint8_t find(const pt_topset *ts, const char *name, size_t len, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ts->names[i].len == len && memcmp(ts->names[i].name, name, len) == 0)
            return (uint8_t)(i + 1);
    return 0;
}

static uint8_t place(pt_topset *ts, const char *name) {
    size_t len = strlen(name);
    if (len == 0 || len > PORTEIRO_TOP_NAME_MAX)
        return 0;
    uint8_t known = find(ts, name, len, atomic_load_explicit(&ts->nnames, memory_order_acquire));
    if (known != 0)
        return known;
    pthread_mutex_lock(&ts->mu);
    size_t i = 0;
    while (i < ts->nnames && (ts->names[i].len != len || memcmp(ts->names[i].name, name, len) != 0))
        i++;
    uint8_t at = 0;
    if (i < ts->nnames) {
        at = (uint8_t)(i + 1);
    } else if (i < PORTEIRO_TOP_MAX_NAMES) {
        pt_topkeys *t = pt_topkeys_new(ts->k);
        if (t != NULL) {
            memcpy(ts->names[i].name, name, len + 1);
            ts->names[i].len = len;
            ts->names[i].keys = t;
            atomic_store_explicit(&ts->nnames, i + 1, memory_order_release);
            at = (uint8_t)(i + 1);
        }
    }
    pthread_mutex_unlock(&ts->mu);
    return at;
}

void pt_top_tag(pt_topset *ts, pt_call *call, size_t i, const char *name) {
    if (ts == NULL || name == NULL || i >= call->nlimits || call->keys[i] == NULL)
        return;
    /* pt_call_prepare* put where the client key (or its digest) sits in
     * the call's buffer into top_off and top_len. */
    call->top[i] = place(ts, name);
}

void pt_top_tag_multi(pt_topset *ts, pt_call *call, const porteiro_multi_request *req) {
    if (ts == NULL)
        return;
    for (size_t i = 0; i < req->nitems && i < call->nlimits; i++)
        pt_top_tag(ts, call, i, req->items[i].top_name);
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts); /* ms is plenty for 10 s intervals */
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A settle (applied, or answered by on_error: the units were used all the
 * same): each tagged item's U, the units it used (a single check's
 * estimate + delta; a multi item's cost is its U), under its name. */
static void feed_used(pt_topset *ts, const pt_call *call) {
    int64_t now = -1;
    for (size_t i = 0; i < call->nlimits; i++) {
        if (call->top[i] == 0)
            continue;
        int64_t units = call->multi ? call->costs[i] : call->cost + call->delta;
        if (units > 0) {
            if (now < 0)
                now = call->now_ms != PORTEIRO_NOW ? call->now_ms : wall_ms();
            pthread_mutex_lock(&ts->mu);
            pt_topkeys **u = &ts->names[call->top[i] - 1].used;
            if (*u == NULL) /* the name's first settle: its one allocation */
                *u = pt_topkeys_new_outcomes(ts->k, 1);
            pt_topkeys_add(*u, 0, call->buf + call->top_off[i], call->top_len[i], units, now);
            pthread_mutex_unlock(&ts->mu);
        }
        if (!call->multi)
            break;
    }
}

void pt_top_feed(pt_topset *ts, const pt_call *call, const porteiro_decision *d) {
    if (call->settle) {
        feed_used(ts, call);
        return;
    }
    if (call->refund)
        return;
    int64_t now = -1;
    for (size_t i = 0; i < call->nlimits; i++) {
        if (call->top[i] == 0)
            continue;
        int outcome;
        if (call->multi) {
            /* An item that denied is the one limited; the others of a
             * denied check consumed nothing and are not counted. */
            if (!d->limits[i].allowed)
                outcome = PT_TOP_DENIED;
            else if (d->allowed)
                outcome = PT_TOP_ALLOWED;
            else
                continue;
        } else {
            outcome = d->allowed ? PT_TOP_ALLOWED : PT_TOP_DENIED;
        }
        int64_t units = pt_call_cost(call, i);
        if (units <= 0)
            continue;
        if (now < 0)
            now = call->now_ms != PORTEIRO_NOW ? call->now_ms : wall_ms();
        pthread_mutex_lock(&ts->mu);
        pt_topkeys_add(ts->names[call->top[i] - 1].keys, outcome, call->buf + call->top_off[i],
                       call->top_len[i], units, now);
        pthread_mutex_unlock(&ts->mu);
        if (!call->multi)
            break;
    }
}

/* ---- the public read side ------------------------------------------- */

size_t porteiro_top_k(const porteiro_t *p) {
    return p != NULL && p->top != NULL ? p->top->k : 0;
}

porteiro_status porteiro_top_get(porteiro_t *const *handles, size_t nhandles, const char *name,
                                 porteiro_top_outcome outcome, porteiro_top_window window,
                                 int64_t now_ms, porteiro_top_key *keys, size_t max, size_t *nkeys,
                                 int64_t *total) {
    if ((handles == NULL && nhandles > 0) || name == NULL || (keys == NULL && max > 0) ||
        nkeys == NULL || total == NULL || (unsigned)outcome > (unsigned)PORTEIRO_TOP_USED ||
        (unsigned)window > PORTEIRO_TOP_10M)
        return PORTEIRO_ERR_INVALID;
    if (now_ms == PORTEIRO_NOW)
        now_ms = wall_ms();
    size_t len = strlen(name);
    pt_top_acc acc;
    pt_top_acc_init(&acc);
    for (size_t h = 0; h < nhandles; h++) {
        pt_topset *ts = handles[h] != NULL ? handles[h]->top : NULL;
        if (ts == NULL)
            continue;
        pthread_mutex_lock(&ts->mu);
        for (size_t i = 0; i < ts->nnames; i++) {
            if (ts->names[i].len != len || memcmp(ts->names[i].name, name, len) != 0)
                continue;
            if (outcome == PORTEIRO_TOP_USED)
                pt_top_acc_add(&acc, ts->names[i].used, 0, (int)window, now_ms);
            else
                pt_top_acc_add(&acc, ts->names[i].keys, (int)outcome, (int)window, now_ms);
        }
        pthread_mutex_unlock(&ts->mu);
    }
    size_t n = pt_top_acc_finish(&acc);
    if (acc.nomem) {
        pt_top_acc_free(&acc);
        return PORTEIRO_ERR_NOMEM;
    }
    *nkeys = n < max ? n : max;
    for (size_t i = 0; i < *nkeys; i++) {
        memcpy(keys[i].key, acc.e[i].key, acc.e[i].len);
        keys[i].key_len = acc.e[i].len;
        keys[i].count = acc.e[i].count;
        keys[i].error = acc.e[i].error;
    }
    *total = acc.total;
    pt_top_acc_free(&acc);
    return PORTEIRO_OK;
}

size_t porteiro_top_names(porteiro_t *const *handles, size_t nhandles,
                          char (*names)[PORTEIRO_TOP_NAME_MAX + 1], size_t max) {
    size_t n = 0;
    for (size_t h = 0; h < nhandles && handles != NULL; h++) {
        pt_topset *ts = handles[h] != NULL ? handles[h]->top : NULL;
        if (ts == NULL)
            continue;
        pthread_mutex_lock(&ts->mu);
        for (size_t i = 0; i < ts->nnames && n < max; i++) {
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++)
                seen = strcmp(names[j], ts->names[i].name) == 0;
            if (!seen)
                memcpy(names[n++], ts->names[i].name, ts->names[i].len + 1);
        }
        pthread_mutex_unlock(&ts->mu);
    }
    return n;
}
