/* test_sliding_error.c — how far the sliding window counter is from the
 * exact sliding log (docs/algorithms.md quotes these numbers).
 *
 * The same arrival stream feeds the counter (the C arithmetic the memory
 * backend runs) and an exact log kept here. Measured: how many arrivals the
 * two decide differently, and the most arrivals the counter admits in any
 * interval of P ms, against the bound derived in the docs:
 *   true count in (now - P, now] <= L + prev * e / P < 2L. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/algorithms.h"

#define P 60000
#define L 100

/* The exact log: admitted times, oldest first (a ring). */
typedef struct exact_log {
    int64_t t[L];
    int head, n;
} exact_log;

static bool log_check(exact_log *g, int64_t now) {
    while (g->n > 0 && g->t[g->head] <= now - P) {
        g->head = (g->head + 1) % L;
        g->n--;
    }
    if (g->n + 1 > L)
        return false;
    g->t[(g->head + g->n) % L] = now;
    g->n++;
    return true;
}

static bool counter_check(pt_state *st, bool *has, int64_t now) {
    const porteiro_limit l = {PORTEIRO_SLIDING_WINDOW, L, P, L};
    pt_eval e;
    pt_algorithm_eval(&l, *has ? st : NULL, now, 1, 0, &e);
    if (e.write) {
        *st = e.next;
        *has = true;
    }
    return e.result.allowed;
}

/* The most admitted times in any interval (t - P, t]; times sorted. */
static int max_in_period(const int64_t *t, int n) {
    int best = 0;
    for (int i = 0, j = 0; i < n; i++) {
        while (t[j] <= t[i] - P)
            j++;
        if (i - j + 1 > best)
            best = i - j + 1;
    }
    return best;
}

typedef struct result {
    int arrivals, counter_admitted, log_admitted, counter_max;
    int wrongly_allowed, wrongly_denied; /* against the exact rule applied
                                            to the counter's own history */
} result;

static result run(const int64_t *arrivals, int n) {
    exact_log g = {{0}, 0, 0};
    pt_state st = {0, 0, 0};
    bool has = false;
    int64_t *admitted = malloc((size_t)n * sizeof(*admitted));
    result r = {n, 0, 0, 0, 0, 0};
    for (int i = 0, oldest = 0; i < n; i++) {
        int64_t now = arrivals[i];
        /* What the exact rule says given what the counter let through. */
        while (oldest < r.counter_admitted && admitted[oldest] <= now - P)
            oldest++;
        bool exact = r.counter_admitted - oldest + 1 <= L;
        bool a = counter_check(&st, &has, now);
        r.wrongly_allowed += a && !exact;
        r.wrongly_denied += !a && exact;
        r.log_admitted += log_check(&g, now);
        if (a)
            admitted[r.counter_admitted++] = now;
    }
    r.counter_max = max_in_period(admitted, r.counter_admitted);
    free(admitted);
    return r;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* ln(x) for 0 < x < 1 without libm: x = m / 2^k with m in [1, 2), then
 * ln(m) = 2 atanh((m - 1) / (m + 1)) by its series. */
static double ln(double x) {
    int k = 0;
    while (x < 1.0) {
        x *= 2.0;
        k++;
    }
    double z = (x - 1.0) / (x + 1.0), z2 = z * z, term = z, sum = 0;
    for (int i = 1; i < 40; i += 2) {
        sum += term / i;
        term *= z2;
    }
    return 2.0 * sum - k * 0.6931471805599453;
}

/* Poisson arrivals at rate x L/P for 500 periods: rate 1 is exactly the
 * limit; 2 is twice the limit. */
static void random_traffic(void **state) {
    (void)state;
    const double rates[] = {0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 5.0};
    enum { MAX = 500 * L * 5 + 1000 };
    int64_t *t = malloc(MAX * sizeof(*t));
    for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
        int n = 0;
        double now = 0, mean = (double)P / (L * rates[k]);
        while (n < MAX && now < 500.0 * P) {
            now += -ln(uniform()) * mean;
            t[n++] = (int64_t)now;
        }
        result r = run(t, n);
        printf("rate %.1fx: %d arrivals; wrongly allowed %d (%.3f%%), wrongly denied %d "
               "(%.3f%%); admitted %d (exact log %d); max in any P %d (%.2f L)\n",
               rates[k], r.arrivals, r.wrongly_allowed, 100.0 * r.wrongly_allowed / r.arrivals,
               r.wrongly_denied, 100.0 * r.wrongly_denied / r.arrivals, r.counter_admitted,
               r.log_admitted, r.counter_max, (double)r.counter_max / L);
        assert_true(r.counter_max < 2 * L);
        /* Random traffic keeps it close: within 20% of L in any period. */
        assert_true(r.counter_max <= L + L / 5);
    }
    free(t);
}

/* The adversary: L arrivals in the last ms of a window, then L more in the
 * last ms of the next one (where prev weighs 2/P). The counter admits
 * nearly 2L within P ms; the log admits L. */
static void worst_case(void **state) {
    (void)state;
    int64_t t[4 * L];
    int n = 0;
    for (int i = 0; i < 2 * L; i++)
        t[n++] = 2 * P - 1;
    for (int i = 0; i < 2 * L; i++)
        t[n++] = 3 * P - 2;
    result r = run(t, n);
    printf("worst case: admitted %d (exact log %d), max in any P: %d (%.2f L)\n",
           r.counter_admitted, r.log_admitted, r.counter_max, (double)r.counter_max / L);
    assert_int_equal(r.log_admitted, L);
    /* L + L - ceil(2L/P) = 2L - 1 with L = 100, P = 60000. */
    assert_int_equal(r.counter_max, 2 * L - 1);

    /* The other side: L arrivals at the first ms of a window are still
     * weighed fully one window later, when the log has dropped them. */
    n = 0;
    for (int i = 0; i < L; i++)
        t[n++] = P;
    for (int i = 0; i < L; i++)
        t[n++] = 2 * P + 1;
    r = run(t, n);
    printf("under-admission: the log admits %d, the counter %d\n", r.log_admitted,
           r.counter_admitted);
    assert_int_equal(r.log_admitted, 2 * L);
    assert_int_equal(r.counter_admitted, L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_traffic),
        cmocka_unit_test(worst_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
