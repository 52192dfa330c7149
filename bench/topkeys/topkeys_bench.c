/* topkeys_bench.c — ns per pt_topkeys_add (one decision counted: both
 * windows of one outcome), on Zipf (s = 1) and uniform keys over 4096
 * distinct keys (at k = 64 the uniform shape evicts a counter on nearly
 * every decision, the Zipf one on about half), k = 64 by
 * default. The budget: <= 100 ns. Usage: topkeys_bench [N [K]];
 * prints one line per traffic shape and exits 1 over budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/topkeys.h"
#include "porteiro.h"

static uint64_t s = 88172645463325252ULL;
static uint64_t rnd(void) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: a loaded machine */
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 5000000;
    size_t k = argc > 2 ? strtoul(argv[2], NULL, 10) : PT_TOP_DEFAULT_K;
    enum { NK = 1 << 12 }; /* 96 KB of keys: in cache, as a key just parsed is */
    static char keys[NK][24];
    static int lens[NK];
    for (int i = 0; i < NK; i++)
        lens[i] = snprintf(keys[i], sizeof(keys[i]), "203.0.113.%d:%d", i % 256, i);
    /* Indexes drawn before timing: skewed (1/u^2-like) and uniform. */
    uint32_t *idx = malloc(n * sizeof(*idx));
    if (idx == NULL)
        return 2;
    int over = 0;
    for (int shape = 0; shape < 2; shape++) {
        for (size_t i = 0; i < n; i++) {
            uint32_t r = (uint32_t)(rnd() % NK);
            /* skewed: NK^u - 1 for a uniform u, log-uniform ids: Zipf with
             * s = 1, as the heavy hitters of real traffic */
            idx[i] = shape == 0 ? (uint32_t)(exp2((double)(rnd() % 1000000) / 1e6 * 12.0) - 1) : r;
        }
        pt_topkeys *t = pt_topkeys_new(k);
        if (t == NULL)
            return 2;
        int64_t ms = 1733430000000LL;
        double t0 = now_ns();
        for (size_t i = 0; i < n; i++)
            pt_topkeys_add(t, (int)(i & 1), keys[idx[i]], (size_t)lens[idx[i]], 1,
                           ms + (int64_t)(i >> 10));
        double per = (now_ns() - t0) / (double)n;
        printf("topkeys_add %-8s k=%zu n=%zu: %.1f ns per decision (memory %zu bytes)\n",
               shape == 0 ? "skewed" : "uniform", k, n, per, pt_topkeys_memory(t));
        over |= per > 100.0;
        pt_topkeys_free(t);
    }
    free(idx);
    /* The whole hook: porteiro_check_request (.policy) on the memory backend with the
     * top keys off and on (k = 64), random keys over NK: what a decision
     * costs more with them, lookup of the name and locking included. */
    double per_check[2];
    for (int on = 0; on < 2; on++) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.top_keys = on ? k : 0;
        porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
        if (p == NULL)
            return 2;
        porteiro_policy pol = {.name = "api", .nlimits = 1};
        pol.limits[0] = (porteiro_limit){PORTEIRO_FIXED_WINDOW, 100, 1000, 0};
        size_t m = n / 4;
        double t0 = now_ns();
        for (size_t i = 0; i < m; i++) {
            porteiro_decision d;
            uint32_t j = (uint32_t)(rnd() % NK);
            porteiro_check_request(p,
                                   &(porteiro_request){.policy = &pol,
                                                       .key = keys[j],
                                                       .key_len = (size_t)lens[j],
                                                       .cost = 1,
                                                       .now_ms = PORTEIRO_NOW},
                                   &d);
        }
        per_check[on] = (now_ns() - t0) / (double)m;
        porteiro_free(p);
    }
    printf("a policy's check (memory backend, random keys): %.1f ns with top keys off, "
           "%.1f ns on: +%.1f ns per decision\n",
           per_check[0], per_check[1], per_check[1] - per_check[0]);
    return over;
}
