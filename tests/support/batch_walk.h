/* batch_walk.h — test support: the twin walk through batches, for one
 * node (test_batch.c) and for a cluster (test_cluster.c). */
#ifndef TEST_BATCH_WALK_H
#define TEST_BATCH_WALK_H

#include <stddef.h>

#include "porteiro.h"

/* A handle on url (NULL: memory) that fails loudly instead of falling back,
 * with a generous budget and batch_max checks per script call. */
porteiro_t *open_batching(const char *url, const char *prefix, size_t batch_max);

/* Fails the running test unless a and b agree on every field (step and
 * check j name the place in the message). */
void batch_same_decision(const porteiro_decision *a, const porteiro_decision *b, int step,
                         size_t j);

/* 150 rounds of porteiro_check_many with 1..40 checks over `keys` keys x
 * every algorithm alone and two mixed policies, costs 0..3, one injected
 * clock moving 0..150 ms a round: a batching handle, a one-call-per-check
 * handle (prefixes prefix-batch, prefix-single) and the memory backend
 * must agree on every field of every decision, and the walk must mix
 * allowed and denied checks. Fails the running cmocka test otherwise. */
void batch_twin_walk(const char *url, const char *prefix, unsigned keys);

#endif
