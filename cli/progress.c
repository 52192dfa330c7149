/* progress.c — `porteiro bench`'s progress line (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "bench.h"

static void draw(bench_progress *p, int64_t now) {
    int64_t done = atomic_load_explicit(&p->done, memory_order_relaxed);
    int64_t elapsed = now - p->start_us;
    double rate = elapsed > 0 ? (double)done * 1e6 / (double)elapsed : 0;
    char left[32] = "?";
    if (rate > 0)
        snprintf(left, sizeof(left), "%.0fs", (double)(p->total - done) / rate + 0.5);
    /* \r: back to the start of the line; ESC[K: erase what a longer line left. */
    fprintf(stderr, "\rporteiro bench: %lld/%lld checks, %.0f/s, %s left\033[K", (long long)done,
            (long long)p->total, rate, left);
    fflush(stderr);
    p->last_draw_us = now;
}

bench_progress *bench_progress_start(bench_progress *p, int64_t total) {
    if (!isatty(STDERR_FILENO))
        return NULL;
    atomic_init(&p->done, 0);
    p->total = total;
    p->start_us = bench_now_us();
    draw(p, p->start_us);
    return p;
}

void bench_progress_add(bench_progress *p, int64_t n) {
    if (p != NULL)
        atomic_fetch_add_explicit(&p->done, n, memory_order_relaxed);
}

void bench_progress_tick(bench_progress *p) {
    if (p == NULL)
        return;
    int64_t now = bench_now_us();
    if (now - p->last_draw_us >= BENCH_PROGRESS_EVERY_US)
        draw(p, now);
}

void bench_progress_end(bench_progress *p) {
    if (p == NULL)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}
