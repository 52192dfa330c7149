/* test_quota_exact.c — quota leases never over-admit (docs/quota_leasing.md):
 * 16 processes x 2 threads (one handle per process, shared by its threads)
 * check one key as fast as they can, with leases on, for every leasable
 * algorithm; one more process takes leases and dies holding one. Then:
 *   - the windows: all allowed <= L, and <= Redis's own count of the window
 *     (read from the key: every allowed unit was counted), and
 *     >= L - (processes x max_units) (the published under-admission bound);
 *   - the buckets: all allowed <= B + the refill over the run, and
 *     >= B - (processes x max_units).
 * A run whose window turned over while it ran is run again on a new key.
 * test_quota_exact_module runs it all again with porteiro.so loaded: the
 * grants are then the module's porteiro.lease (checked in commandstats). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/call.h"
#include "porteiro.h"
#include "redis_server.h"

#define PROCS 16
#define THREADS 2
#define MAX_UNITS 25
#define RUN_MS 800

typedef struct child_run {
    porteiro_t *p;
    const porteiro_limit *limit;
    const char *key;
    int64_t until_ms;
    long allowed;
    long errors;
} child_run;

static int64_t wall_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void *hammer(void *arg) {
    child_run *r = arg;
    while (test_mono_ms() < r->until_ms) {
        porteiro_decision d;
        if (porteiro_check(r->p, r->limit, r->key, 1, &d) != PORTEIRO_OK ||
            d.fallback != PORTEIRO_FALLBACK_NONE)
            r->errors++;
        else
            r->allowed += d.allowed;
    }
    return NULL;
}

static porteiro_t *open_child(void) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = group_redis.url;
    o.tls_ca_file = test_group_ca;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 2000; /* a loaded machine must not fall back */
    o.connect_timeout_ms = 2000; /* 17 processes connect at once */
    o.quota_lease = (porteiro_quota_lease){100, MAX_UNITS, 0};
    return porteiro_new(&o, NULL, NULL, 0);
}

/* A child: its threads' allowed checks (and errors) into the pipe. */
static void child(int fd, const porteiro_limit *limit, const char *key, bool dies) {
    long out[2] = {0, 0};
    porteiro_t *p = open_child();
    if (p == NULL) {
        out[1] = 1;
    } else if (dies) {
        /* Checks until it holds a lease with units, then dies with it. */
        child_run r = {p, limit, key, 0, 0, 0};
        for (int i = 0; i < 40; i++) {
            porteiro_decision d;
            if (porteiro_check(p, limit, key, 1, &d) != PORTEIRO_OK)
                r.errors++;
            else
                r.allowed += d.allowed;
        }
        out[0] = r.allowed;
        out[1] = r.errors;
        if (write(fd, out, sizeof(out)) != sizeof(out))
            _exit(3);
        _exit(0); /* no porteiro_free: the lease dies with the process */
    } else {
        child_run runs[THREADS];
        pthread_t th[THREADS];
        int64_t until = test_mono_ms() + RUN_MS;
        for (int t = 0; t < THREADS; t++) {
            runs[t] = (child_run){p, limit, key, until, 0, 0};
            pthread_create(&th[t], NULL, hammer, &runs[t]);
        }
        for (int t = 0; t < THREADS; t++) {
            pthread_join(th[t], NULL);
            out[0] += runs[t].allowed;
            out[1] += runs[t].errors;
        }
        porteiro_free(p);
    }
    if (write(fd, out, sizeof(out)) != sizeof(out))
        _exit(3);
    _exit(0);
}

/* porteiro.lease's calls so far (0 without the module), and whether this
 * run's server has the module (test_quota_exact_module). */
static long long lease_calls(void) {
    char out[16384] = "";
    if (test_redis_cmd(&group_redis, out, sizeof(out), "INFO commandstats") != 0)
        return -1;
    const char *at = strstr(out, "cmdstat_porteiro.lease:calls=");
    return at != NULL ? atoll(at + strlen("cmdstat_porteiro.lease:calls=")) : 0;
}

static bool with_module(void) {
    const char *args = getenv("PORTEIRO_TEST_REDIS_ARGS");
    return args != NULL && strstr(args, "loadmodule") != NULL;
}

/* Runs every process on key; returns the allowed total, errors in *errors. */
static long run_all(const porteiro_limit *limit, const char *key, long *errors) {
    long long leases0 = lease_calls();
    int fds[PROCS + 1][2];
    pid_t pids[PROCS + 1];
    for (int i = 0; i <= PROCS; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[i][0]);
            child(fds[i][1], limit, key, i == PROCS);
        }
        close(fds[i][1]);
    }
    long total = 0;
    *errors = 0;
    for (int i = 0; i <= PROCS; i++) {
        long got[2] = {0, 1};
        assert_int_equal(read(fds[i][0], got, sizeof(got)), sizeof(got));
        close(fds[i][0]);
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        total += got[0];
        *errors += got[1];
    }
    long long leases = lease_calls() - leases0;
    fprintf(stderr, "porteiro.lease: %lld calls\n", leases);
    if (with_module())
        assert_true(leases > 0); /* the grants were the module's */
    else
        assert_int_equal(leases, 0);
    return total;
}

/* Redis's own count of the window of a fixed or sliding window key. */
static long long redis_count(const porteiro_limit *limit, const char *key, int64_t window) {
    pt_call call;
    char err[128];
    assert_int_equal(pt_call_prepare(&call, "porteiro", 8, limit, 1, key, strlen(key), 1,
                                     PORTEIRO_NOW, err, sizeof(err)),
                     PORTEIRO_OK);
    redisContext *rc = redisConnect("127.0.0.1", group_redis.port);
    assert_true(rc != NULL && rc->err == 0);
    const char *argv[] = {"GET", call.keys[0]};
    size_t lens[] = {3, call.key_lens[0]};
    redisReply *r = redisCommandArgv(rc, 2, argv, lens);
    assert_true(r != NULL && r->type == REDIS_REPLY_STRING && (r->len == 16 || r->len == 24));
    double ab[3];
    memcpy(ab, r->str, r->len);
    assert_true((int64_t)ab[0] == window);
    freeReplyObject(r);
    redisFree(rc);
    return (long long)ab[1];
}

static void windows(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 3000, 600000, 0},
        {PORTEIRO_SLIDING_WINDOW, 3000, 600000, 0},
    };
    for (size_t i = 0; i < 2; i++) {
        bool checked = false;
        for (int attempt = 0; attempt < 3 && !checked; attempt++) {
            char key[48];
            snprintf(key, sizeof(key), "exact-%zu-%d", i, attempt);
            int64_t w0 = wall_ms() / limits[i].period_ms;
            long errors;
            long total = run_all(&limits[i], key, &errors);
            int64_t w1 = wall_ms() / limits[i].period_ms;
            if (w0 != w1)
                continue; /* the window turned over while it ran */
            long long counted = redis_count(&limits[i], key, w0);
            fprintf(stderr, "%s: allowed %ld of %lld, Redis counted %lld, %ld errors\n",
                    porteiro_algorithm_name(limits[i].algorithm), total, (long long)limits[i].limit,
                    counted, errors);
            /* A check Redis did not answer in time (a loaded machine, a
             * sanitizer build) is an error, no decision: it admits nothing. */
            assert_true(errors < 50);
            assert_true(total <= limits[i].limit);
            assert_true(total <= counted && counted <= limits[i].limit);
            assert_true(total >= limits[i].limit - (PROCS + 1) * MAX_UNITS);
            checked = true;
        }
        /* Every attempt crossed a window boundary: nothing was asserted,
         * which is a failure, not a pass. */
        if (!checked)
            fail_msg("%s: the 10 min window turned over during each of 3 runs",
                     porteiro_algorithm_name(limits[i].algorithm));
    }
}

static void buckets(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_TOKEN_BUCKET, 500, 1000, 2000},
        {PORTEIRO_GCRA, 500, 1000, 2000},
    };
    for (size_t i = 0; i < 2; i++) {
        char key[48];
        snprintf(key, sizeof(key), "exact-bucket-%zu", i);
        int64_t t0 = test_mono_ms();
        long errors;
        long total = run_all(&limits[i], key, &errors);
        int64_t ms = test_mono_ms() - t0;
        long most = 2000 + (long)((ms * 500 + 999) / 1000);
        fprintf(stderr, "%s: allowed %ld, at most %ld (B + refill over %lld ms), %ld errors\n",
                porteiro_algorithm_name(limits[i].algorithm), total, most, (long long)ms, errors);
        assert_true(errors < 50);
        assert_true(total <= most);
        assert_true(total >= 2000 - (PROCS + 1) * MAX_UNITS);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(windows),
        cmocka_unit_test(buckets),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
