/* spoe_check.h — what porteirod's SPOE agent answers to one NOTIFY frame,
 * apart from the socket: its `check` message decided by the library on the
 * worker's loop (the policy's tiers, overrides, shadow mode, lease and top
 * keys as on the HTTP face), and the ACK frame that sets HAProxy's
 * variables. spoe_server.c carries the frames; the fuzz target drives this
 * directly. docs/haproxy.md.
 *
 *   spoe-message check
 *       args policy=str(api) key=req.hdr(x-api-key) cost=int(1) [tier=req.hdr(x-plan)]
 * or, several keys as Envoy's descriptors, decided by envoy ratelimit's
 * config (the envoy: section, envoy_rls.h) all-or-nothing:
 *       args domain=str(edge) d0.remote_address=src d1.path=path d1.remote_address=src
 *
 * The variables set (scope txn, under HAProxy's var-prefix):
 *   allowed (0/1), remaining, limit, reset_ms, retry_after_ms, retry_after
 *   (seconds, denials only), ratelimit and ratelimit_policy (the RateLimit
 *   and RateLimit-Policy header values), fallback (open, closed or local:
 *   decided without Redis), shadow_denied (1: the policy's shadow mode let a
 *   denial through), error (why there is no decision). */
#ifndef PD_SPOE_CHECK_H
#define PD_SPOE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "spop.h"

struct pd_worker;

/* The bytes of the answer, a whole ACK frame with its length in front;
 * NULL when out of memory (the connection is then closed with
 * PD_SPOP_RESOURCE). Valid only during the call. */
typedef struct pd_spoe_reply pd_spoe_reply;
typedef void pd_spoe_reply_fn(pd_spoe_reply *reply, const uint8_t *ack, size_t len);

/* Where the answer goes: the caller's, living until fn is called. */
struct pd_spoe_reply {
    pd_spoe_reply_fn *fn;
};

/* The most an ACK of this agent takes: the frame's room, whatever HAProxy
 * allows (the RateLimit-Policy of 8 limits fits well within it). */
#define PD_SPOE_ACK_MAX 4096

/* Answers one NOTIFY frame f, its messages already found well-formed
 * (pd_spop_notify_check), with an ACK of at most max_frame bytes: the
 * first `check` message is decided, any other message is acknowledged
 * without actions. reply->fn is called exactly once, maybe before this
 * returns. f is borrowed for the call only. */
void pd_spoe_notify(struct pd_worker *w, const pd_spop_frame *f, uint32_t max_frame,
                    pd_spoe_reply *reply);

#endif
