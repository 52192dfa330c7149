/* test_concurrency.c — decisions stay exact under contention.
 *
 * 8 processes x 4 threads send 10 000 checks at one key with room for
 * 1 000 (or B with no refill: the clock is injected and fixed). Exactly that
 * many pass, and the remaining values of the passing checks are each value
 * once (every decision saw a distinct, consistent state: no lost update).
 * Variants: each thread its own handle; one handle shared by the threads of
 * a process (the documented thread-safety); pipelined check_many. The
 * memory backend: 16 threads on one handle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define PROCS 8
#define THREADS 4
#define CHECKS 10000
#define HOUR 3600000LL
#define NOW_MS 1800000LL /* fixed: inside the first hour window, no refill */
#define BATCH 10

typedef enum mode { OWN_HANDLE, SHARED_HANDLE, PIPELINED } mode;

typedef struct worker {
    porteiro_t *p; /* shared, or NULL: open its own */
    const char *url;
    const porteiro_limit *limit;
    mode how;
    int checks;
    int failures; /* statuses other than OK */
    int allowed;
    int64_t remaining[CHECKS]; /* of the allowed decisions */
} worker;

static void count(worker *w, porteiro_status st, const porteiro_decision *d) {
    if (st != PORTEIRO_OK) {
        w->failures++;
        return;
    }
    if (d->allowed)
        w->remaining[w->allowed++] = d->remaining;
}

static void *work(void *arg) {
    worker *w = arg;
    porteiro_t *p = w->p;
    if (p == NULL) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = w->url;
        o.tls_ca_file = w->url != NULL ? test_group_ca : NULL; /* the _tls build */
        o.prefix = "conc";
        o.on_error = PORTEIRO_ON_ERROR_ERROR;
        o.breaker_failures = -1;
        o.connect_timeout_ms = 10000;
        o.command_timeout_ms = 10000;
        p = porteiro_new(&o, NULL, NULL, 0);
        if (p == NULL) {
            w->failures = w->checks;
            return NULL;
        }
    }
    porteiro_request req = {.limits = w->limit,
                            .nlimits = 1,
                            .key = "one-key",
                            .key_len = 7,
                            .cost = 1,
                            .now_ms = NOW_MS,
                            .max_wait_ms = 0};
    for (int done = 0; done < w->checks;) {
        int n = w->how == PIPELINED ? BATCH : 1;
        if (n > w->checks - done)
            n = w->checks - done;
        porteiro_request reqs[BATCH];
        porteiro_decision ds[BATCH];
        porteiro_status sts[BATCH];
        for (int i = 0; i < n; i++)
            reqs[i] = req;
        if (n == 1)
            sts[0] = porteiro_check_request(p, &req, &ds[0]);
        else
            porteiro_check_many(p, reqs, (size_t)n, ds, sts);
        for (int i = 0; i < n; i++)
            count(w, sts[i], &ds[i]);
        done += n;
    }
    if (w->p == NULL)
        porteiro_free(p);
    return NULL;
}

/* Runs nthreads workers for this process's share [from, to) of CHECKS and
 * returns them (caller frees). */
static worker *run_threads(const char *url, const porteiro_limit *limit, mode how, int nthreads,
                           int from, int to) {
    worker *ws = calloc((size_t)nthreads, sizeof(*ws));
    pthread_t tids[16];
    porteiro_t *shared = NULL;
    if (how != OWN_HANDLE) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = url;
        o.tls_ca_file = url != NULL ? test_group_ca : NULL; /* the _tls build */
        o.prefix = "conc";
        o.on_error = PORTEIRO_ON_ERROR_ERROR;
        o.breaker_failures = -1;
        o.connect_timeout_ms = 10000;
        o.command_timeout_ms = 10000;
        shared = porteiro_new(&o, NULL, NULL, 0);
    }
    for (int t = 0; t < nthreads; t++) {
        ws[t].p = shared;
        ws[t].url = url;
        ws[t].limit = limit;
        ws[t].how = how;
        ws[t].checks =
            from + (to - from) * (t + 1) / nthreads - (from + (to - from) * t / nthreads);
        if (how != OWN_HANDLE && shared == NULL)
            ws[t].failures = ws[t].checks;
        else
            pthread_create(&tids[t], NULL, work, &ws[t]);
    }
    for (int t = 0; t < nthreads; t++)
        if (how == OWN_HANDLE || shared != NULL)
            pthread_join(tids[t], NULL);
    porteiro_free(shared);
    return ws;
}

/* The allowed decisions' remaining values must be want-1 .. 0, once each. */
static void expect_permutation(const int64_t *values, int n, int64_t want, const char *what) {
    TU_EQ(n, want, "%s: allowed", what);
    char *seen = calloc((size_t)want, 1);
    for (int i = 0; i < n; i++) {
        if (values[i] < 0 || values[i] >= want || seen[values[i]]) {
            print_error("%s: remaining %lld twice or out of range\n", what, (long long)values[i]);
            fail();
        }
        seen[values[i]] = 1;
    }
    free(seen);
}

/* A child process: its threads' results through the pipe as [failures,
 * allowed, remaining...], then _exit (never back into cmocka or atexit). */
static void child(int fd, const porteiro_limit *limit, mode how, int proc) {
    int from = CHECKS * proc / PROCS, to = CHECKS * (proc + 1) / PROCS;
    worker *ws = run_threads(group_redis.url, limit, how, THREADS, from, to);
    int32_t failures = 0, allowed = 0;
    for (int t = 0; t < THREADS; t++) {
        failures += ws[t].failures;
        allowed += ws[t].allowed;
    }
    int ok = write(fd, &failures, 4) == 4 && write(fd, &allowed, 4) == 4;
    for (int t = 0; t < THREADS && ok; t++) {
        size_t len = (size_t)ws[t].allowed * sizeof(int64_t);
        ok = write(fd, ws[t].remaining, len) == (ssize_t)len;
    }
    free(ws);
    _exit(ok ? 0 : 3);
}

static size_t read_all(int fd, void *buf, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

static void across_processes(const porteiro_limit *limit, mode how, int64_t want,
                             const char *what) {
    redisContext *c = tu_redis(&group_redis);
    freeReplyObject(tu_cmd(c, "FLUSHALL"));
    int fds[PROCS];
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        int pipefd[2];
        assert_int_equal(pipe(pipefd), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(pipefd[0]);
            child(pipefd[1], limit, how, i);
        }
        close(pipefd[1]);
        fds[i] = pipefd[0];
    }
    int64_t *all = calloc(CHECKS, sizeof(*all));
    int total = 0, failures = 0;
    for (int i = 0; i < PROCS; i++) {
        int32_t head[2] = {0, 0};
        assert_int_equal(read_all(fds[i], head, 8), 8);
        failures += head[0];
        assert_true(head[1] >= 0 && total + head[1] <= CHECKS);
        size_t len = (size_t)head[1] * sizeof(int64_t);
        assert_int_equal(read_all(fds[i], all + total, len), len);
        total += head[1];
        close(fds[i]);
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        TU_EQ(WIFEXITED(status) && WEXITSTATUS(status) == 0, 1, "%s: child %d", what, i);
    }
    TU_EQ(failures, 0, "%s: failed checks", what);
    expect_permutation(all, total, want, what);
    free(all);
    /* One key holds the state, and it expires. */
    TU_EQ(tu_cmd_int(c, "DBSIZE"), 1, "%s", what);
    redisFree(c);
}

static const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 1000, HOUR, 0};
static const porteiro_limit sw = {PORTEIRO_SLIDING_WINDOW, 1000, HOUR, 0};
static const porteiro_limit tb = {PORTEIRO_TOKEN_BUCKET, 1000, HOUR, 0};
static const porteiro_limit gc = {PORTEIRO_GCRA, 1000, HOUR, 0};
static const porteiro_limit tb_b = {PORTEIRO_TOKEN_BUCKET, 10, HOUR, 700};
static const porteiro_limit gc_b = {PORTEIRO_GCRA, 10, HOUR, 700};

static void redis_own_handles(void **state) {
    (void)state;
    across_processes(&fw, OWN_HANDLE, 1000, "fixed window, own handles");
    across_processes(&sw, OWN_HANDLE, 1000, "sliding window, own handles");
    across_processes(&tb, OWN_HANDLE, 1000, "token bucket, own handles");
    across_processes(&gc_b, OWN_HANDLE, 700, "gcra B=700, own handles");
}

static void redis_shared_handle(void **state) {
    (void)state;
    across_processes(&gc, SHARED_HANDLE, 1000, "gcra, shared handle");
    across_processes(&tb_b, SHARED_HANDLE, 700, "token bucket B=700, shared handle");
}

static void redis_pipelined(void **state) {
    (void)state;
    across_processes(&fw, PIPELINED, 1000, "fixed window, check_many");
}

static void memory_threads(void **state) {
    (void)state;
    const porteiro_limit *limits[] = {&fw, &sw, &tb, &gc, &tb_b, &gc_b};
    const int64_t want[] = {1000, 1000, 1000, 1000, 700, 700};
    for (int i = 0; i < 6; i++) {
        worker *ws = run_threads(NULL, limits[i], i % 2 ? PIPELINED : SHARED_HANDLE, 16, 0, CHECKS);
        int64_t *all = calloc(CHECKS, sizeof(*all));
        int total = 0;
        for (int t = 0; t < 16; t++) {
            TU_EQ(ws[t].failures, 0, "memory, limit %d", i);
            memcpy(all + total, ws[t].remaining, (size_t)ws[t].allowed * sizeof(int64_t));
            total += ws[t].allowed;
        }
        expect_permutation(all, total, want[i], "memory");
        free(all);
        free(ws);
    }
}

/* check_many: one decision per request, in order, across keys and
 * algorithms; more than 16 requests (the pipeline's stack buffer). */
static void check_many_in_order(void **state) {
    (void)state;
    const porteiro_limit a = {PORTEIRO_FIXED_WINDOW, 10, 60000, 0};
    const porteiro_limit b = {PORTEIRO_GCRA, 5, 1000, 0};
    enum { N = 40 };
    for (int backend = 0; backend < 2; backend++) {
        porteiro_t *p = tu_open(backend ? group_redis.url : NULL, "many", 0);
        porteiro_request reqs[N];
        porteiro_decision ds[N];
        porteiro_status sts[N];
        for (int i = 0; i < N; i++)
            reqs[i] = i % 2 ? (porteiro_request){.limits = &b,
                                                 .nlimits = 1,
                                                 .key = "b",
                                                 .key_len = 1,
                                                 .cost = 1,
                                                 .now_ms = 5000,
                                                 .max_wait_ms = 0}
                            : (porteiro_request){.limits = &a,
                                                 .nlimits = 1,
                                                 .key = "a",
                                                 .key_len = 1,
                                                 .cost = 1,
                                                 .now_ms = 5000,
                                                 .max_wait_ms = 0};
        TU_EQ(porteiro_check_many(p, reqs, N, ds, sts), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        for (int i = 0; i < N; i++) {
            int k = i / 2; /* the k-th check of its key */
            int64_t room = i % 2 ? 5 : 10;
            TU_EQ(sts[i], PORTEIRO_OK, "request %d", i);
            TU_EQ(ds[i].allowed, k < room, "backend %d, request %d", backend, i);
            TU_EQ(ds[i].remaining, k < room ? room - 1 - k : 0, "backend %d, request %d", backend,
                  i);
            TU_EQ(ds[i].limit, room, "backend %d, request %d", backend, i);
            TU_EQ(ds[i].retry_after_ms, k < room ? 0 : (i % 2 ? 200 : 55000), "request %d", i);
        }
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(check_many_in_order), cmocka_unit_test(memory_threads),
        cmocka_unit_test(redis_own_handles),   cmocka_unit_test(redis_shared_handle),
        cmocka_unit_test(redis_pipelined),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
