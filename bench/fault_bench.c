/* fault_bench.c — what checks cost while Redis fails, and how long until
 * Redis decides again once it is back.
 *
 * For each fault, against a private redis-server on loopback, one thread
 * checks as fast as it can while the fault lasts, then until the first
 * decision Redis made again. It prints a Markdown table: decisions/s during
 * the fault, p50/p99/max latency of a decision, the p99 of decisions the
 * open breaker answered alone, counts by outcome, and the recovery time
 * (from the moment Redis answers again to the first normal decision).
 *
 *   fault_bench [--budget-ms N] [--seconds S] [--on-error open|closed|local]
 *               [--breaker K] [--only FAULT]
 *
 * --breaker -1 turns the breaker off: then every decision pays the budget. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "porteiro.h"
#include "redis_server.h"

typedef struct bench {
    test_redis redis, master; /* master: the other end of REPLICAOF */
    int seconds;
    _Atomic int64_t healed_at_us; /* when Redis answers again; 0 = not yet */
    pthread_t helper;
    bool helper_running;
} bench;

typedef struct fault {
    const char *name;
    const char *what;
    void (*start)(bench *b); /* at t = 0 */
    void (*end)(bench *b);   /* at t = seconds (may heal later, in a thread) */
    bool one_key;            /* the fault is in one key, not in Redis */
} fault;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void healed(bench *b) {
    atomic_store(&b->healed_at_us, now_us());
}

static void run_helper(bench *b, void *(*fn)(void *)) {
    b->helper_running = pthread_create(&b->helper, NULL, fn, b) == 0;
}

/* ---- the faults ------------------------------------------------------ */

static void nothing(bench *b) {
    (void)b;
}
static void heal_now(bench *b) {
    healed(b);
}

static void *restart_then_heal(void *arg) {
    bench *b = arg;
    if (test_redis_restart(&b->redis) != 0)
        fprintf(stderr, "fault_bench: redis-server did not restart\n");
    healed(b);
    return NULL;
}

static void kill9_start(bench *b) {
    test_redis_kill9(&b->redis);
}
static void kill9_end(bench *b) {
    run_helper(b, restart_then_heal);
}
static void restart_start(bench *b) {
    run_helper(b, restart_then_heal);
}
static void freeze_start(bench *b) {
    test_redis_freeze(&b->redis);
}
static void freeze_end(bench *b) {
    test_redis_thaw(&b->redis);
    healed(b);
}

static void pause_start(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "CLIENT PAUSE %d ALL", b->seconds * 1000);
}

static void *debug_sleep(void *arg) {
    bench *b = arg;
    test_redis_cmd(&b->redis, NULL, 0, "DEBUG SLEEP %d", b->seconds);
    healed(b);
    return NULL;
}

static void sleep_start(bench *b) {
    run_helper(b, debug_sleep);
}
static void flush_start(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "SCRIPT FLUSH");
}

static void readonly_start(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "REPLICAOF 127.0.0.1 %d", b->master.port);
}

static void readonly_end(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "REPLICAOF NO ONE");
    healed(b);
}

#define WRONG_KEY "porteiro:{k0}:gc:1000000:1000:1000000"
static void wrongtype_start(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "SET " WRONG_KEY " x");
}
static void wrongtype_end(bench *b) {
    test_redis_cmd(&b->redis, NULL, 0, "DEL " WRONG_KEY);
    healed(b);
}

static const fault faults[] = {
    {"none", "no fault (baseline)", nothing, heal_now, false},
    {"kill9", "kill -9, restart after the fault", kill9_start, kill9_end, false},
    {"restart", "SIGTERM and restart, same port", restart_start, nothing, false},
    {"sigstop", "SIGSTOP, then SIGCONT", freeze_start, freeze_end, false},
    {"pause", "CLIENT PAUSE ALL for the fault", pause_start, heal_now, false},
    {"sleep", "DEBUG SLEEP for the fault", sleep_start, nothing, false},
    {"flush", "SCRIPT FLUSH", flush_start, heal_now, false},
    {"readonly", "REPLICAOF (READONLY), then NO ONE", readonly_start, readonly_end, false},
    {"wrongtype", "a string at one limiter key", wrongtype_start, wrongtype_end, true},
};

/* ---- measuring ------------------------------------------------------- */

typedef struct samples {
    int64_t *us;
    size_t n, cap;
} samples;

static void add(samples *s, int64_t us) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->us = realloc(s->us, s->cap * sizeof(*s->us));
        if (s->us == NULL) {
            fprintf(stderr, "fault_bench: out of memory\n");
            exit(1);
        }
    }
    s->us[s->n++] = us;
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The q-th permille, after sorting; -1 when empty. */
static int64_t permille(samples *s, int q) {
    if (s->n == 0)
        return -1;
    qsort(s->us, s->n, sizeof(*s->us), by_value);
    size_t i = (s->n * (size_t)q) / 1000;
    return s->us[i < s->n ? i : s->n - 1];
}

typedef struct outcome {
    samples all, breaker; /* breaker: decided with the breaker open */
    long allowed, denied, open, closed, local, errors;
    int64_t recovery_ms;
    double per_second;
} outcome;

static void count(outcome *o, porteiro_status st, const porteiro_decision *d, int64_t us) {
    add(&o->all, us);
    if (st != PORTEIRO_OK) {
        o->errors++;
        return;
    }
    if (d->fallback_reason == PORTEIRO_ERR_CIRCUIT_OPEN)
        add(&o->breaker, us);
    switch (d->fallback) {
        case PORTEIRO_FALLBACK_NONE:
            if (d->allowed)
                o->allowed++;
            else
                o->denied++;
            break;
        case PORTEIRO_FALLBACK_OPEN: o->open++; break;
        case PORTEIRO_FALLBACK_CLOSED: o->closed++; break;
        case PORTEIRO_FALLBACK_LOCAL: o->local++; break;
    }
}

/* Checks through the fault and until Redis decides again (10 s at most). */
static void measure(bench *b, const fault *f, porteiro_t *p, outcome *o) {
    static const porteiro_limit roomy = {PORTEIRO_GCRA, 1000000, 1000, 0};
    char key[16];
    porteiro_decision d;
    bool ended = false;
    atomic_store(&b->healed_at_us, 0);
    int64_t t0 = now_us(), fault_end = t0 + (int64_t)b->seconds * 1000000;
    f->start(b);
    for (unsigned i = 0;; i++) {
        snprintf(key, sizeof(key), "k%u", f->one_key ? 0 : i % 1000);
        porteiro_request req = {.limits = &roomy,
                                .nlimits = 1,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = 1,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        int64_t start = now_us();
        porteiro_status st = porteiro_check_request(p, &req, &d);
        int64_t done = now_us(), healed_at = atomic_load(&b->healed_at_us);
        if (healed_at == 0 || start < healed_at) {
            count(o, st, &d, done - start);
        } else if (st == PORTEIRO_OK && d.fallback == PORTEIRO_FALLBACK_NONE) {
            o->recovery_ms = (done - healed_at) / 1000;
            o->per_second = (double)o->all.n * 1e6 / (double)(healed_at - t0);
            return;
        }
        if (!ended && done >= fault_end) {
            ended = true;
            f->end(b);
        }
        if (done - t0 > (int64_t)(b->seconds + 10) * 1000000) {
            o->recovery_ms = -1; /* never came back */
            return;
        }
    }
}

static void print_row(const fault *f, outcome *o) {
    int64_t bp99 = permille(&o->breaker, 990);
    char breaker[48] = "-";
    if (bp99 >= 0)
        snprintf(breaker, sizeof(breaker), "%lld (%zu)", (long long)bp99, o->breaker.n);
    long long p50 = permille(&o->all, 500), p99 = permille(&o->all, 990);
    long long max = o->all.n ? o->all.us[o->all.n - 1] : -1;
    printf("| %s | %.0f | %lld | %lld | %lld | %s | %ld / %ld | %ld / %ld / %ld | %ld | %lld |\n",
           f->name, o->per_second, p50, p99, max, breaker, o->allowed, o->denied, o->open,
           o->closed, o->local, o->errors, (long long)o->recovery_ms);
    fflush(stdout);
}

static int run_fault(const fault *f, const porteiro_options *base, int seconds) {
    bench b = {.seconds = seconds};
    const char *debug = "--enable-debug-command yes";
    if (test_redis_start(&b.redis, debug) != 0 || test_redis_start(&b.master, NULL) != 0)
        return -1;
    porteiro_options o = *base;
    o.redis_url = b.redis.url;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL) {
        fprintf(stderr, "fault_bench: %s\n", err);
        return -1;
    }
    outcome out = {0};
    measure(&b, f, p, &out);
    print_row(f, &out);
    if (b.helper_running)
        pthread_join(b.helper, NULL);
    porteiro_free(p);
    free(out.all.us);
    free(out.breaker.us);
    test_redis_stop(&b.master);
    test_redis_stop(&b.redis);
    return 0;
}

static porteiro_on_error parse_mode(const char *s) {
    if (strcmp(s, "closed") == 0)
        return PORTEIRO_ON_ERROR_CLOSED;
    if (strcmp(s, "local") == 0)
        return PORTEIRO_ON_ERROR_LOCAL;
    return PORTEIRO_ON_ERROR_OPEN;
}

int main(int argc, char **argv) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.command_timeout_ms = 10;
    int seconds = 2;
    const char *only = NULL, *mode = "open";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--budget-ms") == 0)
            o.command_timeout_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--on-error") == 0)
            mode = argv[i + 1];
        else if (strcmp(argv[i], "--breaker") == 0)
            o.breaker_failures = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--only") == 0)
            only = argv[i + 1];
    }
    o.on_error = parse_mode(mode);
    if (seconds < 1 || o.command_timeout_ms < 1) {
        fprintf(stderr, "usage: fault_bench [--budget-ms N] [--seconds S] [--on-error MODE] "
                        "[--breaker K] [--only FAULT]\n");
        return 2;
    }
    struct utsname u;
    uname(&u);
    double load = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &load) != 1)
            load = 0;
        fclose(f);
    }
    printf("porteiro %s fault_bench: budget %d ms, faults of %d s, on_error %s, breaker %d; "
           "%s %s, %ld CPUs, load %.2f\n\n",
           PORTEIRO_VERSION, o.command_timeout_ms, seconds, mode, o.breaker_failures, u.sysname,
           u.machine, sysconf(_SC_NPROCESSORS_ONLN), load);
    printf("| fault | decisions/s | p50 us | p99 us | max us | breaker-open p99 us (n) | "
           "allowed / denied | open / closed / local | errors | recovery ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
        if (only == NULL || strcmp(only, faults[i].name) == 0)
            if (run_fault(&faults[i], &o, seconds) != 0)
                return 1;
    printf("\n");
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
        printf("- %s: %s\n", faults[i].name, faults[i].what);
    return 0;
}
