/* test_reserve.c — reservations (porteiro_request.max_wait_ms): worked
 * examples of every algorithm on the memory backend and on a real
 * redis-server (the numbers of docs/algorithms.md, "Reservations"), a
 * policy's longest wait, a refund that cancels one, the bad requests, the
 * deny cache, the CLI's --max-wait, and 8 processes x 4 threads asking one
 * key at once: nothing over the limit, no capacity wasted. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "porteiro.h"
#include "redis_server.h"
#include "test_util.h"

#define GC PORTEIRO_GCRA
#define TB PORTEIRO_TOKEN_BUCKET
#define FW PORTEIRO_FIXED_WINDOW
#define SW PORTEIRO_SLIDING_WINDOW
#define SL PORTEIRO_SLIDING_LOG

/* One step: at now, cost (refund: gives cost back) with max_wait ->
 * allowed, remaining, reset, retry, wait of the decision. */
typedef struct step {
    int64_t now, cost, max_wait;
    int refund;
    int allowed;
    int64_t remaining, reset, retry, wait;
} step;
#define END                                                                                        \
    { .now = -1 }

typedef struct example {
    const char *name;
    size_t n;
    porteiro_limit limits[2];
    step steps[12];
} example;

static const example examples[] = {
    /* T = 100 ms per unit, tau = 200 ms. */
    {"gcra",
     1,
     {{GC, 10, 1000, 2}},
     {{1000, 1, 0, 0, 1, 1, 100, 0, 0},
      {1000, 1, 0, 0, 1, 0, 200, 0, 0},
      {1000, 1, 0, 0, 0, 0, 200, 100, 0},
      {1000, 1, 99, 0, 0, 0, 200, 100, 0},   /* beyond the wait: nothing taken */
      {1000, 1, 100, 0, 1, 0, 300, 0, 100},  /* the TAT moves on to 1300 */
      {1000, 2, 1000, 0, 1, 0, 500, 0, 300}, /* TAT 1500: passes at 1300 */
      {1000, 3, 10000, 0, 0, 0, 500, -1, 0}, /* more than B: never */
      {1000, 2, 0, 1, 1, 0, 300, 0, 0},      /* cancel: the TAT back to 1300 */
      {1000, 2, 1000, 0, 1, 0, 500, 0, 300}, /* the same reservation again */
      {1250, 0, 0, 0, 1, 0, 250, 0, 0},
      END}},
    /* Tokens x P; the bucket goes below zero by what the wait refills. */
    {"token_bucket",
     1,
     {{TB, 10, 1000, 2}},
     {{1000, 2, 0, 0, 1, 0, 200, 0, 0},
      {1000, 1, 100, 0, 1, 0, 300, 0, 100}, /* tokens -1 */
      {1000, 1, 150, 0, 0, 0, 300, 200, 0},
      {1000, 1, 200, 0, 1, 0, 400, 0, 200}, /* tokens -2 */
      {1000, 1, 0, 1, 1, 0, 300, 0, 0},     /* cancel one */
      {1200, 0, 0, 0, 1, 1, 100, 0, 0},     /* -1 + 2 refilled: 1 left */
      {1300, 0, 0, 0, 1, 2, 0, 0, 0},
      END}},
    /* L = 3 per 1000 ms window. */
    {"fixed_window across a window edge",
     1,
     {{FW, 3, 1000, 0}},
     {{900, 3, 0, 0, 1, 0, 100, 0, 0},
      {950, 1, 49, 0, 0, 0, 50, 50, 0},
      {950, 1, 50, 0, 1, 0, 1050, 0, 50},     /* counted in window 1 */
      {960, 1, 0, 0, 0, 2, 1040, 40, 0},      /* window 1 has not begun */
      {960, 2, 40, 0, 1, 0, 1040, 0, 40},     /* window 1 full */
      {960, 1, 2000, 0, 1, 0, 2040, 0, 1040}, /* window 2 */
      {1000, 1, 0, 0, 0, 2, 2000, 1000, 0},
      {1000, 1, 0, 1, 1, 3, 0, 0, 0}, /* cancel: window 2 empty again */
      END}},
    {"sliding_window",
     1,
     {{SW, 4, 1000, 0}},
     {{500, 4, 0, 0, 1, 0, 1500, 0, 0},
      {600, 1, 649, 0, 0, 0, 1400, 650, 0},
      {600, 1, 650, 0, 1, 0, 2400, 0, 650}, /* 4 x 750/1000 + 1 <= 4 at 1250 */
      {700, 1, 0, 0, 0, 0, 2300, 800, 0},   /* seen from 1000: 4 x 500/1000 + 2 */
      {700, 1, 800, 0, 1, 0, 2300, 0, 800},
      END}},
    /* A reservation's entries are written at the time they pass. */
    {"sliding_log",
     1,
     {{SL, 3, 1000, 0}},
     {{1000, 3, 0, 0, 1, 0, 1000, 0, 0},
      {1200, 1, 800, 0, 1, 0, 1800, 0, 800}, /* an entry at 2000 */
      {1200, 1, 0, 0, 0, 0, 1800, 800, 0},
      {1200, 2, 5000, 0, 1, 0, 1800, 0, 800},  /* the units at 1000 leave at 2000 */
      {1200, 2, 0, 1, 1, 0, 1800, 0, 0},       /* cancel: the newest two */
      {1200, 3, 5000, 0, 1, 0, 2800, 0, 1800}, /* the 4th oldest: at 2000 */
      END}},
    /* A policy waits for its slowest limit, all or nothing. */
    {"policy: the longest wait",
     2,
     {{GC, 10, 1000, 1}, {FW, 2, 1000, 0}},
     {{1000, 1, 0, 0, 1, 0, 1000, 0, 0},
      {1000, 1, 100, 0, 1, 0, 1000, 0, 100},  /* gcra 100, fixed window 0 */
      {1000, 1, 150, 0, 0, 0, 1000, 1000, 0}, /* gcra 200, window 2 in 1000 */
      {1000, 1, 1000, 0, 1, 0, 2000, 0, 1000},
      {1000, 1, 150, 0, 0, 0, 2000, 1000, 0}, /* nothing taken by the denial */
      END}},
};

static void run_example(porteiro_t *p, const example *ex, const char *prefix) {
    char key[64];
    snprintf(key, sizeof(key), "%s-%s", prefix, ex->name);
    for (int i = 0; ex->steps[i].now >= 0; i++) {
        const step *s = &ex->steps[i];
        porteiro_request req = {.limits = ex->limits,
                                .nlimits = ex->n,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = s->cost,
                                .now_ms = s->now,
                                .max_wait_ms = s->max_wait};
        porteiro_decision d;
        porteiro_status st =
            s->refund ? porteiro_refund(p, &req, &d) : porteiro_check_request(p, &req, &d);
        TU_EQ(st, PORTEIRO_OK, "%s %s step %d: %s", prefix, ex->name, i, porteiro_errmsg(p));
        TU_EQ(d.allowed, s->allowed, "%s %s step %d", prefix, ex->name, i);
        TU_EQ(d.remaining, s->remaining, "%s %s step %d", prefix, ex->name, i);
        TU_EQ(d.reset_ms, s->reset, "%s %s step %d", prefix, ex->name, i);
        TU_EQ(d.retry_after_ms, s->retry, "%s %s step %d", prefix, ex->name, i);
        TU_EQ(d.wait_ms, s->wait, "%s %s step %d", prefix, ex->name, i);
    }
}

static void worked_examples(void **state) {
    (void)state;
    porteiro_t *mem = tu_open(NULL, NULL, 0);
    porteiro_t *red = tu_open(group_redis.url, "rsv", 0);
    for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
        run_example(mem, &examples[i], "memory");
        run_example(red, &examples[i], "redis");
    }
    porteiro_free(mem);
    porteiro_free(red);
}

/* A bad wait, and a concurrency limit (nothing to wait for). */
static void bad_requests(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, NULL, 0);
    porteiro_limit gc = {GC, 10, 1000, 0}, cc = {PORTEIRO_CONCURRENCY, 10, 1000, 0};
    porteiro_decision d;
    porteiro_request req = {.limits = &gc,
                            .nlimits = 1,
                            .key = "k",
                            .key_len = 1,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = -1};
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "max_wait_ms"));
    req.max_wait_ms = PORTEIRO_MAX_WAIT_MS + 1;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_INVALID);
    req.max_wait_ms = PORTEIRO_MAX_WAIT_MS;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    req = (porteiro_request){.limits = &cc,
                             .nlimits = 1,
                             .key = "k",
                             .key_len = 1,
                             .cost = 1,
                             .now_ms = PORTEIRO_NOW,
                             .max_wait_ms = 100};
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "concurrency"));
    porteiro_free(p);
}

/* A denial the deny cache holds answers a check that may wait only when
 * the wait would not do; else Redis reserves. */
static void deny_cache(void **state) {
    (void)state;
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = group_redis.url;
    o.prefix = "rsv-dc";
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 5000;
    o.deny_cache_keys = 100;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit gc = {GC, 1, 10000, 1}; /* one unit per 10 s */
    porteiro_request req = {.limits = &gc,
                            .nlimits = 1,
                            .key = "dc",
                            .key_len = 2,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    porteiro_decision d;
    porteiro_stats s;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK); /* cached */
    assert_false(d.allowed);
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    porteiro_stats_get(p, &s);
    TU_EQ(s.deny_cache_hits, 1, "a plain denial from the cache");
    req.max_wait_ms = 1000; /* the wait would not do: denied from the cache */
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_stats_get(p, &s);
    TU_EQ(s.deny_cache_hits, 2, "a wait too short: the cache answers");
    req.max_wait_ms = 20000; /* a wait would do: Redis reserves */
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_true(d.wait_ms > 9000 && d.wait_ms <= 10000);
    porteiro_stats_get(p, &s);
    TU_EQ(s.deny_cache_hits, 2, "never a denial from the cache when a wait would do");
    porteiro_free(p);
}

/* porteiro check --max-wait: wait_ms in the JSON, exit 0 after a wait. */
static int run_cli(char *out, size_t outlen, const char *args) {
    const char *cli = getenv("PORTEIRO_CLI");
    if (cli == NULL)
        fail_msg("set PORTEIRO_CLI");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s check --redis %s %s 2>&1", cli, group_redis.url, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void cli_max_wait(void **state) {
    (void)state;
    char out[2048];
    const char *lim = "--algorithm gcra --limit 1 --period 10s --prefix rsv-cli";
    char args[512];
    snprintf(args, sizeof(args), "%s --max-wait 1m cli-key", lim);
    TU_EQ(run_cli(out, sizeof(out), args), 0, "%s", out);
    assert_non_null(strstr(out, "\"wait_ms\":0"));
    TU_EQ(run_cli(out, sizeof(out), args), 0, "%s", out); /* allowed after ~10 s */
    assert_non_null(strstr(out, "\"allowed\":true"));
    const char *w = strstr(out, "\"wait_ms\":");
    assert_non_null(w);
    long wait = atol(w + 10); /* 10 s less the time between the two runs */
    assert_true(wait > 5000 && wait <= 10000);
    snprintf(args, sizeof(args), "%s --max-wait 5s cli-key", lim); /* ~20 s: denied */
    TU_EQ(run_cli(out, sizeof(out), args), 1, "%s", out);
    assert_non_null(strstr(out, "\"allowed\":false"));
    snprintf(args, sizeof(args), "%s cli-key", lim); /* no --max-wait: no wait_ms */
    TU_EQ(run_cli(out, sizeof(out), args), 1, "%s", out);
    assert_null(strstr(out, "wait_ms"));
    snprintf(args, sizeof(args), "%s --max-wait 2d cli-key", lim);
    TU_EQ(run_cli(out, sizeof(out), args), 2, "%s", out);
    assert_non_null(strstr(out, "max_wait_ms"));
    snprintf(args, sizeof(args), "%s --max-wait soon cli-key", lim);
    TU_EQ(run_cli(out, sizeof(out), args), 2, "%s", out);
}

/* ---- 8 processes x 4 threads on one key, the Redis clock --------------- */

#define PROCS 8
#define THREADS 4
#define MAX_ADMITS 4096

typedef struct admit {
    int64_t proceed_us;  /* CLOCK_REALTIME when the caller went on */
    int64_t asked_us;    /* before the call */
    int64_t answered_us; /* after it */
    int64_t wait_ms, reset_ms;
} admit;

typedef struct shared {
    _Atomic int n;
    _Atomic int denied;
    admit a[MAX_ADMITS];
} shared;

typedef struct run {
    shared *sh;
    porteiro_limit limit;
    int64_t max_wait_ms;
    int64_t start_us, until_us; /* every caller starts at once, connected */
    char key[64];
} run;

static int64_t real_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_until_us(int64_t t) {
    for (int64_t now = real_us(); now < t; now = real_us()) {
        struct timespec ts = {(t - now) / 1000000, ((t - now) % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Each thread: its own handle; asks, sleeps its wait, records, again. */
static void *asker(void *arg) {
    run *r = arg;
    porteiro_t *p = tu_open(group_redis.url, "rsv-conc", 0);
    porteiro_decision d;
    porteiro_check(p, &r->limit, "warm-up", 0, &d); /* connected before the start */
    sleep_until_us(r->start_us);
    while (real_us() < r->until_us) {
        porteiro_request req = {.limits = &r->limit,
                                .nlimits = 1,
                                .key = r->key,
                                .key_len = strlen(r->key),
                                .cost = 1,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = r->max_wait_ms};
        int64_t t0 = real_us();
        if (porteiro_check_request(p, &req, &d) != PORTEIRO_OK)
            break;
        int64_t t1 = real_us();
        if (!d.allowed) {
            atomic_fetch_add(&r->sh->denied, 1);
            sleep_until_us(t1 + 2000);
            continue;
        }
        /* The caller goes on wait_ms after Redis decided, at the latest
         * when the answer is here. */
        sleep_until_us(t1 + d.wait_ms * 1000);
        int i = atomic_fetch_add(&r->sh->n, 1);
        if (i < MAX_ADMITS)
            r->sh->a[i] = (admit){real_us(), t0, t1, d.wait_ms, d.reset_ms};
    }
    porteiro_free(p);
    return NULL;
}

static int by_proceed(const void *x, const void *y) {
    const admit *a = x, *b = y;
    return (a->proceed_us > b->proceed_us) - (a->proceed_us < b->proceed_us);
}

/* How far an admission's proceed time may be from the instant Redis
 * meant: its round trip (Redis decided somewhere in it) plus how late its
 * sleep ended, us. */
static int64_t own_slack(const admit *a) {
    int64_t late = a->proceed_us - (a->answered_us + a->wait_ms * 1000);
    return (a->answered_us - a->asked_us) + late;
}

/* Runs the askers; returns the admissions sorted by proceed time and the
 * slack: the most a caller's clock can be off Redis's (a round trip) plus
 * how late its sleep ended, us. */
static size_t concurrent(shared *sh, porteiro_limit limit, int64_t max_wait_ms, const char *key,
                         int run_ms, int64_t *slack_us) {
    memset(sh, 0, sizeof(*sh));
    /* Every caller connected first (a loaded machine forks slowly): demand
     * is above the rate from the first check on. */
    int64_t start = real_us() + 1500000;
    run r = {sh, limit, max_wait_ms, start, start + (int64_t)run_ms * 1000, ""};
    snprintf(r.key, sizeof(r.key), "%s", key);
    pid_t kids[PROCS];
    for (int k = 0; k < PROCS; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
            pthread_t th[THREADS];
            for (int t = 0; t < THREADS; t++)
                pthread_create(&th[t], NULL, asker, &r);
            for (int t = 0; t < THREADS; t++)
                pthread_join(th[t], NULL);
            _exit(0);
        }
    }
    for (int k = 0; k < PROCS; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    size_t n = (size_t)atomic_load(&sh->n);
    assert_true(n > 0 && n < MAX_ADMITS);
    qsort(sh->a, n, sizeof(sh->a[0]), by_proceed);
    int64_t slack = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t s = own_slack(&sh->a[i]);
        slack = s > slack ? s : slack;
    }
    *slack_us = slack;
    return n;
}

/* No over-admission: any k consecutive admissions (by proceed time) span
 * at least the time the limit needs for k - B units, less the slack. And
 * with demand above the rate nothing is wasted: the count is B plus the
 * rate times the span, within one unit (and the slack's worth). */
static void check_rate(const shared *sh, size_t n, const porteiro_limit *l, int64_t slack_us,
                       const char *what) {
    const admit *a = sh->a;
    int64_t B = l->burst > 0 ? l->burst : l->limit;
    /* A wait is rounded up to whole ms: 1 ms more of slack. */
    double s_ms = (double)slack_us / 1000.0 + 1.0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i; j < n; j++) {
            double span = (double)(a[j].proceed_us - a[i].proceed_us) / 1000.0;
            double bound = (double)B + (double)l->limit * (span + s_ms) / (double)l->period_ms;
            if ((double)(j - i + 1) > bound + 1e-9)
                fail_msg("%s: %zu units in %.3f ms, bound %.2f (slack %.3f ms)", what, j - i + 1,
                         span, bound, s_ms);
        }
    }
    /* The span is off by the first and the last admission's own slack. */
    double span = (double)(a[n - 1].proceed_us - a[0].proceed_us) / 1000.0;
    double ends_ms = (double)(own_slack(&a[0]) + own_slack(&a[n - 1])) / 1000.0 + 1.0;
    double expect = (double)B + (double)l->limit * span / (double)l->period_ms;
    double tol = 1.0 + (double)l->limit * ends_ms / (double)l->period_ms;
    print_message("%s: %zu admitted over %.1f ms, expected %.2f (+-%.2f), slack %.3f ms, "
                  "%d denied\n",
                  what, n, span, expect, tol, s_ms, atomic_load(&sh->denied));
    if ((double)n < expect - tol || (double)n > expect + tol)
        fail_msg("%s: %zu admitted, expected %.2f +- %.2f", what, n, expect, tol);
}

static shared *map_shared(void) {
    shared *sh =
        mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    return sh;
}

/* 32 callers hold up to 32 reservations, 1.3 s of the rate (25/s): demand
 * stays above it through any stall of a loaded machine shorter than that. */
static void many_askers(porteiro_algorithm a, const char *key, const char *what) {
    shared *sh = map_shared();
    porteiro_limit l = {a, 25, 1000, 5};
    int64_t slack;
    size_t n = concurrent(sh, l, 3000, key, 3000, &slack);
    check_rate(sh, n, &l, slack, what);
    assert_true(slack < 1000000); /* a sanity bound on the measurement */
    munmap(sh, sizeof(*sh));
}

static void many_askers_gcra(void **state) {
    (void)state;
    many_askers(GC, "conc-gcra", "gcra");
}

static void many_askers_token_bucket(void **state) {
    (void)state;
    many_askers(TB, "conc-tb", "token_bucket");
}

/* Fixed windows of 500 ms, L = 40: each admission's window is the one its
 * reset ends (Redis decided between asked and answered); a window holds at
 * most L, every window the run covered fully holds exactly L (demand is
 * above the rate), and nobody went on before its window began. */
static void many_askers_fixed_window(void **state) {
    (void)state;
    shared *sh = map_shared();
    const int64_t P = 500, L = 40;
    porteiro_limit l = {FW, L, P, 0};
    int64_t slack;
    int64_t start_ms = real_us() / 1000;
    size_t n = concurrent(sh, l, 1200, "conc-fw", 2200, &slack);
    int64_t counts[64] = {0}, first = -1, last = -1;
    for (size_t i = 0; i < n; i++) {
        const admit *a = &sh->a[i];
        /* The window's end, a multiple of P: Redis decided at some instant
         * in [asked, answered], and reset_ms counts from there. */
        int64_t lo = a->asked_us / 1000 + a->reset_ms, hi = a->answered_us / 1000 + a->reset_ms;
        int64_t end = hi / P * P, w = end / P - 1;
        assert_true(end >= lo); /* one multiple of P within a round trip */
        if (first < 0)
            first = w;
        assert_true(w - first < 64);
        counts[w - first]++;
        last = w > last ? w : last;
        /* Not before its window began (the slack: clocks and sleeps). */
        assert_true(a->proceed_us / 1000 >= w * P - 1);
        (void)start_ms;
    }
    for (int64_t w = first; w <= last; w++)
        print_message("window %lld: %lld\n", (long long)(w - first), (long long)counts[w - first]);
    for (int64_t w = first; w <= last; w++) {
        TU_EQ(counts[w - first] <= L, 1, "window %lld holds %lld", (long long)w,
              (long long)counts[w - first]);
        /* Windows wholly inside the run: full. */
        if (w > first && w < last - 2)
            TU_EQ(counts[w - first] >= L - 1, 1, "window %lld holds %lld", (long long)w,
                  (long long)counts[w - first]);
    }
    print_message("fixed_window: %zu admitted in windows %lld..%lld, slack %.3f ms\n", n,
                  (long long)first, (long long)last, (double)slack / 1000.0);
    munmap(sh, sizeof(*sh));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(worked_examples),
        cmocka_unit_test(bad_requests),
        cmocka_unit_test(deny_cache),
        cmocka_unit_test(cli_max_wait),
        cmocka_unit_test(many_askers_gcra),
        cmocka_unit_test(many_askers_token_bucket),
        cmocka_unit_test(many_askers_fixed_window),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
