/* progress.h — the progress line of `porteiro bench` on stderr: checks
 * done, the rate so far and the time left, redrawn in place, only when
 * stderr is a terminal (stdout keeps only the JSON result). */
#ifndef CLI_PROGRESS_H
#define CLI_PROGRESS_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct bench_progress {
    _Atomic int64_t done; /* answers so far, added by any thread */
    int64_t total;
    int64_t start_us, last_draw_us;
} bench_progress;

/* Every this many µs at most, a new line is drawn. */
#define BENCH_PROGRESS_EVERY_US 200000

/* Starts p for total checks and draws its first line; returns p, or NULL
 * (nothing will be drawn) when stderr is not a terminal. */
bench_progress *bench_progress_start(bench_progress *p, int64_t total);
/* n more answers. Any thread; p may be NULL. */
void bench_progress_add(bench_progress *p, int64_t n);
/* Redraws the line if the last one is older than BENCH_PROGRESS_EVERY_US.
 * One thread only (the one that started p); p may be NULL. */
void bench_progress_tick(bench_progress *p);
/* Erases the line; p may be NULL. */
void bench_progress_end(bench_progress *p);

#endif
