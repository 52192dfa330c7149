/* top_view.h — one screen of `porteiro top` from the admin listener's
 * /v1/status and /v1/top answers (jansson values), as the live page shows
 * them: decisions per second per policy, Redis nodes, round-trip latency,
 * config reloads, top keys. Pure: no I/O but the FILE it writes to. */
#ifndef CLI_TOP_VIEW_H
#define CLI_TOP_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TOP_LATENCY_MAX 32 /* buckets kept from /v1/status latency.counts */

/* What one poll brought back, and when (monotonic ms). */
typedef struct top_sample {
    json_t *status, *top; /* owned by whoever filled it */
    int64_t at_ms;
} top_sample;

typedef struct top_view {
    const char *admin; /* the URL, for the title */
    int width, height; /* the terminal's size in characters */
    bool color;        /* ANSI colours */
    const char *error; /* the last poll failed: why (NULL when it did not) */
    /* Latency counts from about 60 s before now (n 0: none yet). */
    uint64_t base_counts[TOP_LATENCY_MAX];
    size_t base_n;
    int64_t base_age_ms;
} top_view;

/* Writes one screen: cur is the newest sample, prev the one before (its
 * status NULL: no rates yet). Lines end with ESC[K; the caller homes the
 * cursor first and erases below after. */
void top_view_draw(FILE *out, const top_view *v, const top_sample *cur, const top_sample *prev);

/* A key as it may be shown on a terminal (keys are any bytes): each
 * character a terminal would act on (C0 and C1 controls, DEL, bidi
 * formatting) and each byte that is no UTF-8 as '?'; cut to width
 * characters, never inside one, with '~'. dst holds cap bytes. */
void top_view_safe(char *dst, size_t cap, const char *key, int width);

#endif
