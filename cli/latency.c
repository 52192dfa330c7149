/* latency.c — the log-linear latency histogram. */
#include "latency.h"

static int bucket_of(int64_t us) {
    if (us < 1024)
        return us < 0 ? 0 : (int)us;
    int e = 63 - __builtin_clzll((unsigned long long)us); /* floor(log2 us) >= 10 */
    if (e > 41)
        return CLI_LATENCY_BUCKETS - 1; /* beyond 2^42 us (50 days): clamp */
    int sub = (int)((us >> (e - 6)) & 63);
    return 1024 + (e - 10) * 64 + sub;
}

static int64_t lower_bound_of(int b) {
    if (b < 1024)
        return b;
    int e = 10 + (b - 1024) / 64, sub = (b - 1024) % 64;
    return ((int64_t)64 + sub) << (e - 6);
}

void cli_latency_add(cli_latency *h, int64_t us, uint64_t n) {
    h->count[bucket_of(us)] += n;
    h->total += n;
}

void cli_latency_merge(cli_latency *into, const cli_latency *from) {
    for (int i = 0; i < CLI_LATENCY_BUCKETS; i++)
        into->count[i] += from->count[i];
    into->total += from->total;
}

int64_t cli_latency_quantile(const cli_latency *h, int permille) {
    if (h->total == 0)
        return 0;
    /* The rank of the sample, 1-based, rounded up: p99 of 100 is the 99th. */
    uint64_t rank = (h->total * (uint64_t)permille + 999) / 1000, seen = 0;
    if (rank == 0)
        rank = 1;
    for (int i = 0; i < CLI_LATENCY_BUCKETS; i++) {
        seen += h->count[i];
        if (seen >= rank)
            return lower_bound_of(i);
    }
    return lower_bound_of(CLI_LATENCY_BUCKETS - 1);
}
