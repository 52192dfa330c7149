/* spread.c — a multi-key check over several Redis Cluster slots (spread.h). */
#include "limiter/spread.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/algorithms.h"
#include "limiter/decide.h"
#include "topology/slots.h"

/* The slots of call's keys into slot[], and how many differ. */
static size_t slots_of(const pt_call *call, int *slot) {
    size_t distinct = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        if (call->alias[i] != i) { /* the same key as an earlier item */
            slot[i] = slot[call->alias[i]];
            continue;
        }
        slot[i] = pt_key_slot(call->keys[i], call->key_lens[i]);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = slot[j] == slot[i];
        distinct += !seen;
    }
    return distinct;
}

bool pt_spread_applies(const porteiro_t *p, const pt_call *call) {
    int slot[PORTEIRO_MAX_LIMITS];
    return p->redis != NULL && call->multi && (!call->refund || call->settle) && !call->giveback &&
           pt_router_is_cluster(p->redis) && slots_of(call, slot) > 1;
}

/* Appends limit i of src (its key copied into dst's buffer at *at) as
 * dst's next limit; returns its place. */
static size_t add_limit(pt_call *dst, char **at, const pt_call *src, size_t i) {
    size_t k = dst->nlimits++;
    dst->limits[k] = src->limits[i];
    dst->costs[k] = src->costs[i];
    dst->deltas[k] = src->deltas[i];
    dst->item_shadow[k] = src->item_shadow[i];
    dst->any_item_shadow = dst->any_item_shadow || src->item_shadow[i];
    dst->alias[k] = (uint8_t)k;
    memcpy(*at, src->keys[i], src->key_lens[i]);
    dst->keys[k] = *at;
    dst->key_lens[k] = src->key_lens[i];
    *at += src->key_lens[i];
    dst->cost += src->costs[i];
    return k;
}

pt_spread *pt_spread_new(const pt_call *call) {
    int slot[PORTEIRO_MAX_LIMITS], sub_slot[PORTEIRO_MAX_LIMITS];
    pt_spread *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->nsub = slots_of(call, slot);
    s->subs = malloc(s->nsub * sizeof(*s->subs));
    if (s->subs == NULL) {
        free(s);
        return NULL;
    }
    char *at[PORTEIRO_MAX_LIMITS];
    size_t nsub = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        size_t j = 0;
        while (j < nsub && sub_slot[j] != slot[i])
            j++;
        if (j == nsub) { /* a slot not seen yet: its sub-call */
            sub_slot[nsub++] = slot[i];
            pt_call *c = &s->subs[j];
            memset(c, 0, offsetof(pt_call, buf));
            memset(c->top, 0, sizeof(c->top));
            c->now_ms = call->now_ms;
            c->on_error = call->on_error;
            c->multi = true; /* the flat policy, which says when it judged */
            c->split_out = &s->extra[j];
            s->extra[j].now_ms = -1;
            if (call->settle) { /* settle.lua, each item its delta: no split reply */
                c->settle = true;
                c->refund = true;
                c->age_ms = call->age_ms;
                c->split_out = NULL;
            }
            at[j] = c->buf;
        }
        s->sub_of[i] = (uint8_t)j;
        pt_call *c = &s->subs[j];
        if (call->alias[i] != i) { /* one state with an earlier item of this slot */
            size_t k = c->nlimits++, first = s->pos[call->alias[i]];
            c->limits[k] = call->limits[i];
            c->costs[k] = call->costs[i];
            c->deltas[k] = call->deltas[i];
            c->item_shadow[k] = call->item_shadow[i];
            c->any_item_shadow = c->any_item_shadow || call->item_shadow[i];
            c->alias[k] = (uint8_t)first;
            c->keys[k] = c->keys[first];
            c->key_lens[k] = c->key_lens[first];
            c->cost += call->costs[i];
            s->pos[i] = (uint8_t)k;
        } else {
            s->pos[i] = (uint8_t)add_limit(c, &at[j], call, i);
        }
    }
    return s;
}

void pt_spread_free(pt_spread *s) {
    if (s == NULL)
        return;
    free(s->subs);
    free(s);
}

/* Slot j allowed: each of its items allowed, or is in shadow. */
static bool slot_allowed(const pt_spread *s, size_t j) {
    const pt_call *c = &s->subs[j];
    for (size_t k = 0; k < c->nlimits; k++)
        if (!s->sd[j].limits[k].allowed && !c->item_shadow[k])
            return false;
    return true;
}

porteiro_status pt_spread_combine(const pt_spread *s, const pt_call *call, porteiro_decision *d) {
    bool denied = false;
    for (size_t j = 0; j < s->nsub; j++) {
        if (s->ss[j] != PORTEIRO_OK)
            return s->ss[j]; /* on_error answers: no limit goes unchecked */
        denied = denied || !slot_allowed(s, j);
    }
    memset(d, 0, sizeof(*d));
    d->nlimits = call->nlimits;
    for (size_t i = 0; i < call->nlimits; i++) {
        size_t j = s->sub_of[i];
        porteiro_result r = s->sd[j].limits[s->pos[i]];
        /* Its slot took the units, another slot denied: they go back, and
         * it reports its state as it stood before, as one call's denial
         * does. */
        if (denied && slot_allowed(s, j) && s->extra[j].remaining[s->pos[i]] >= 0 &&
            s->extra[j].reset_ms[s->pos[i]] >= 0) {
            r.remaining = s->extra[j].remaining[s->pos[i]];
            r.reset_ms = s->extra[j].reset_ms[s->pos[i]];
        }
        d->limits[i] = r;
    }
    d->fallback = PORTEIRO_FALLBACK_NONE;
    d->fallback_reason = PORTEIRO_OK;
    pt_decision_finish(d);
    if (call->settle) /* the largest debt, and the most added in one limit */
        for (size_t j = 0; j < s->nsub; j++) {
            d->debt = s->sd[j].debt > d->debt ? s->sd[j].debt : d->debt;
            d->debt_added =
                s->sd[j].debt_added > d->debt_added ? s->sd[j].debt_added : d->debt_added;
        }
    return PORTEIRO_OK;
}

size_t pt_spread_givebacks(const pt_spread *s, const pt_call *call, pt_call *out) {
    size_t n = 0;
    if (call->settle)
        return 0; /* a settle's slots applied their part: nothing to take back */
    for (size_t j = 0; j < s->nsub; j++) {
        const pt_call *c = &s->subs[j];
        if (s->ss[j] != PORTEIRO_OK || !slot_allowed(s, j))
            continue; /* it failed or denied: it wrote nothing we know of */
        pt_call *g = &out[n];
        memset(g, 0, offsetof(pt_call, buf));
        memset(g->top, 0, sizeof(g->top));
        g->now_ms = call->now_ms;
        g->on_error = -1;
        g->refund = true;
        g->giveback = true;
        g->giveback_t0 = s->extra[j].now_ms;
        char *at = g->buf;
        for (size_t k = 0; k < c->nlimits; k++) {
            if (c->alias[k] != k)
                continue; /* a state is given back once, by its first item */
            bool took = false;
            for (size_t m = k; m < c->nlimits; m++)
                took = took || (c->alias[m] == k && s->sd[j].limits[m].allowed && c->costs[m] > 0);
            if (took)
                add_limit(g, &at, c, k);
        }
        /* A slot whose time is unknown (-1) cannot be given back safely:
         * the script refuses "g-1", and the give-back counts as failed. */
        if (g->nlimits > 0)
            n++;
    }
    return n;
}

void pt_spread_count(porteiro_t *p, porteiro_status st, const char *why) {
    static _Atomic int64_t last_log_us;
    p->stats.givebacks++;
    if (st == PORTEIRO_OK)
        return;
    p->stats.giveback_failed++;
    int64_t now = pt_clock_us(), last = atomic_load(&last_log_us);
    if (now - last >= 1000000 && atomic_compare_exchange_strong(&last_log_us, &last, now))
        fprintf(stderr,
                "porteiro: a give-back of a check over several cluster slots failed (%s): "
                "its units stay taken until they expire (porteiro_giveback_failed_total)\n",
                why != NULL && why[0] != '\0' ? why : porteiro_strerror(st));
}
