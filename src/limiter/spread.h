/* spread.h — a multi-key check whose items fall on several Redis Cluster
 * slots (docs/cluster.md, "A check over several slots").
 *
 * Each item's key is on its own key's slot (core/call.c). A multi-key check
 * whose keys are on one slot is one script call, as on one node. Otherwise
 * it is split into one sub-call per slot (that slot's items, the flat policy
 * script with per-item costs: all-or-nothing within the slot), the slots are
 * asked together (blocking: pipelined to their masters; on the loop: sent
 * together and gathered), and their answers make one decision: allowed when
 * every slot allowed. When the caller's answer is not an admission (a slot
 * denied, or failed and on_error did not admit), the units the other slots
 * took are given back (src/lua/giveback.lua: never more than they took and
 * still hold). The give-back is one call per slot, built here; sending it is
 * the caller's (decide.c, async.c), and a give-back that fails is counted
 * (porteiro_stats.giveback_failed) and logged.
 *
 * A multi-key SETTLE (porteiro_settle, .multi) over several slots is split
 * the same way: one settle.lua call per slot (that slot's items, each its
 * delta: atomic within the slot), sent together; the answers make one
 * decision (each item's state after, the largest debt and debt_added). A
 * settle is never denied and never given back: a slot that failed leaves
 * its items at their estimate (the slots that answered keep their part),
 * and the decision is on_error's, as a check's. */
#ifndef PT_LIMITER_SPREAD_H
#define PT_LIMITER_SPREAD_H

#include "limiter/handle.h"

typedef struct pt_spread {
    size_t nsub;
    uint8_t sub_of[PORTEIRO_MAX_LIMITS];       /* item i sits in subs[sub_of[i]] */
    uint8_t pos[PORTEIRO_MAX_LIMITS];          /* at that sub-call's limit pos[i] */
    pt_call *subs;                             /* nsub calls, one slot each */
    porteiro_decision sd[PORTEIRO_MAX_LIMITS]; /* each sub-call's answer */
    porteiro_status ss[PORTEIRO_MAX_LIMITS];
    pt_split_reply extra[PORTEIRO_MAX_LIMITS]; /* each slot's time, states before */
} pt_spread;

/* True when call must be split: a handle on a Redis Cluster, a multi-key
 * check or settle, keys on more than one slot. */
bool pt_spread_applies(const porteiro_t *p, const pt_call *call);

/* A new spread of call (NULL: out of memory): its sub-calls built, one per
 * slot, in the order of their first items. */
pt_spread *pt_spread_new(const pt_call *call);
void pt_spread_free(pt_spread *s);

/* The sub-calls' answers (ss, sd) made into call's: a failed sub-call's
 * status (the first), else PORTEIRO_OK and the decision in *d, item by item
 * (items of a slot that took their units while another denied report their
 * state without them, as in one call). */
porteiro_status pt_spread_combine(const pt_spread *s, const pt_call *call, porteiro_decision *d);

/* The give-backs of a check that was not admitted: one call per slot that
 * answered and took units, into out (room for PORTEIRO_MAX_LIMITS); returns
 * how many. Each borrows nothing from s. */
size_t pt_spread_givebacks(const pt_spread *s, const pt_call *call, pt_call *out);

/* Counts a give-back's outcome; a failure is also logged (at most once a
 * second), with why. Needs p->mu. */
void pt_spread_count(porteiro_t *p, porteiro_status st, const char *why);

#endif
