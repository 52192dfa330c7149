/* tally.h — the answers of checks sent on an event loop, counted (the
 * async lease tests on a cluster and through Sentinel). */
#ifndef PT_TEST_TALLY_H
#define PT_TEST_TALLY_H

#include <event2/event.h>

#include "porteiro.h"

typedef struct test_tally {
    int sent, answered, allowed, denied, failed, fallbacks;
    int fallbacks_allowed; /* on_error's answers that allowed (open, local) */
    char why[256];         /* the handle's message at the last failure or fallback */
} test_tally;

/* A porteiro_decision_fn: arg is the test_tally. */
void test_tally_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg);

/* Runs the loop until every check sent is answered. */
void test_tally_drain(struct event_base *base, test_tally *t);

#endif
