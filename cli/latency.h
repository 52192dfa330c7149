/* latency.h — a latency histogram in microseconds with about 1.6 % precision
 * (exact below 1024 us, then 64 steps per power of two), cheap to fill from
 * a hot loop and to merge across threads. */
#ifndef CLI_LATENCY_H
#define CLI_LATENCY_H

#include <stdint.h>

/* 1024 exact buckets, then 64 per power of two from 2^10 to 2^41 us. */
#define CLI_LATENCY_BUCKETS (1024 + 32 * 64)

typedef struct cli_latency {
    uint64_t count[CLI_LATENCY_BUCKETS];
    uint64_t total;
} cli_latency;

/* Counts n samples of us microseconds (negative counts as 0). */
void cli_latency_add(cli_latency *h, int64_t us, uint64_t n);
void cli_latency_merge(cli_latency *into, const cli_latency *from);
/* The q-th quantile (0 < q <= 1, in thousandths: 500 = p50, 990 = p99):
 * the lower bound of its bucket; 0 when empty. */
int64_t cli_latency_quantile(const cli_latency *h, int permille);

#endif
