/* bench_common.c — keys, shares, clock and counting for both engines. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "bench.h"

int64_t bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t bench_share(const bench_plan *plan, size_t i) {
    int64_t c = (int64_t)plan->connections;
    return plan->requests / c + ((int64_t)i < plan->requests % c);
}

uint64_t bench_seed(size_t i) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)bench_now_us();
    return s != 0 ? s : 1;
}

size_t bench_key(char buf[32], uint64_t *rng, int64_t keys) {
    /* xorshift64: cheap, and good enough to spread keys evenly. */
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    return (size_t)snprintf(buf, 32, "bench:%012" PRIu64, *rng % (uint64_t)keys);
}

void bench_count(bench_result *out, porteiro_t *p, porteiro_status st, const porteiro_decision *d) {
    if (st == PORTEIRO_OK) {
        if (d->allowed)
            out->allowed++;
        else
            out->denied++;
        return;
    }
    out->errors++;
    if (out->error == PORTEIRO_OK) {
        out->error = st;
        snprintf(out->errmsg, sizeof(out->errmsg), "%s", porteiro_errmsg(p));
    }
}
