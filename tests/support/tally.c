/* tally.c — the answers of checks sent on an event loop (tally.h). */
#include "tally.h"

#include <stdio.h>

void test_tally_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    test_tally *t = arg;
    t->answered++;
    if (st != PORTEIRO_OK) {
        t->failed++;
        snprintf(t->why, sizeof(t->why), "%s", porteiro_errmsg(p));
    } else if (d->fallback != 0) {
        t->fallbacks++;
        t->fallbacks_allowed += d->allowed;
        snprintf(t->why, sizeof(t->why), "%s", porteiro_errmsg(p));
    } else {
        t->allowed += d->allowed;
        t->denied += !d->allowed;
    }
}

void test_tally_drain(struct event_base *base, test_tally *t) {
    while (t->answered < t->sent)
        event_base_loop(base, EVLOOP_ONCE);
}
