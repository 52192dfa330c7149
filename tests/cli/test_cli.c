/* test_cli.c — the porteiro command-line tool, run as users run it: the
 * built binary ($PORTEIRO_CLI) with fork/exec, against a real redis-server
 * and the memory backend. Outputs, exit codes and messages are asserted
 * exactly: they are a contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "porteiro.h"
#include "porteiro_config.h"
#include "redis_server.h"

static test_redis redis; /* shared by every test (own keys each) */
static const char *cli;  /* the binary under test */

typedef struct run_result {
    int code;        /* exit code; 128 + signal when killed (never expected) */
    char out[65536]; /* stdout (the whole Lua script fits) */
    char err[4096];  /* stderr */
} run_result;

/* Reads both pipes until both close (poll: neither can fill up and block). */
static void drain(int out_fd, int err_fd, run_result *r) {
    struct pollfd fds[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
    char *bufs[2] = {r->out, r->err};
    size_t caps[2] = {sizeof(r->out) - 1, sizeof(r->err) - 1}, lens[2] = {0, 0};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || fds[i].revents == 0)
                continue;
            char tmp[4096];
            ssize_t n = read(fds[i].fd, tmp, sizeof(tmp));
            if (n <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            size_t take = (size_t)n < caps[i] - lens[i] ? (size_t)n : caps[i] - lens[i];
            memcpy(bufs[i] + lens[i], tmp, take);
            lens[i] += take;
        }
    }
    r->out[lens[0]] = '\0';
    r->err[lens[1]] = '\0';
}

/* Runs porteiro with args (NULL-terminated, without the program name). */
static void run_argv(run_result *r, const char *const *args) {
    const char *argv[64] = {cli};
    size_t n = 1;
    while (args[n - 1] != NULL && n < 63) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    drain(out[0], err[0], r);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define RUN(r, ...)                                                                                \
    do {                                                                                           \
        const char *const run_args_[] = {__VA_ARGS__, NULL};                                       \
        run_argv((r), run_args_);                                                                  \
    } while (0)

/* Exit code and exact stdout. */
static void expect(const run_result *r, int code, const char *out) {
    if (r->code != code || strcmp(r->out, out) != 0)
        print_error("exit %d, stdout [%s], stderr [%s]\n", r->code, r->out, r->err);
    assert_int_equal(r->code, code);
    assert_string_equal(r->out, out);
}

/* The exit code alone (stdout and stderr are shown when it differs). */
static void expect_code(const run_result *r, int code) {
    if (r->code != code)
        print_error("exit %d, stdout [%s], stderr [%s]\n", r->code, r->out, r->err);
    assert_int_equal(r->code, code);
}

/* Exit 2: nothing on stdout, a message naming `mention` on stderr. */
static void expect_usage_error(const run_result *r, const char *mention) {
    if (r->code != 2 || r->out[0] != '\0' || strstr(r->err, mention) == NULL)
        print_error("exit %d, stdout [%s], stderr [%s], wanted [%s]\n", r->code, r->out, r->err,
                    mention);
    assert_int_equal(r->code, 2);
    assert_string_equal(r->out, "");
    assert_non_null(strstr(r->err, mention));
}

/* The integer after "name": in json (the first one: the top level). */
static long long json_int(const char *json, const char *name) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *at = strstr(json, pat);
    assert_non_null(at);
    return strtoll(at + strlen(pat), NULL, 10);
}

/* ---- help and commands ---------------------------------------------- */

static void help_everywhere(void **state) {
    (void)state;
    run_result r;
    RUN(&r, "--help");
    expect_code(&r, 0);
    for (const char *const *c = (const char *const[]){"check", "reset", "bench", "memory", NULL};
         *c; c++)
        assert_non_null(strstr(r.out, *c));

    const char *const commands[] = {"check", "reset", "bench", "memory", "script", "peek"};
    const char *const must[] = {"--on-error", "--algorithm", "--connections", "--prefix",
                                "",           "--now-ms"};
    for (size_t i = 0; i < 6; i++) {
        RUN(&r, commands[i], "--help");
        expect_code(&r, 0);
        assert_true(strncmp(r.out, "usage: porteiro ", 16) == 0);
        assert_non_null(strstr(r.out, must[i]));
        assert_string_equal(r.err, "");
    }
    /* Each command lists only its own flags. */
    RUN(&r, "memory", "--help");
    assert_null(strstr(r.out, "--cost"));
    RUN(&r, "check", "--help");
    assert_null(strstr(r.out, "--connections"));
    assert_non_null(strstr(r.out, "--now-ms"));
    assert_non_null(strstr(r.out, "--limits"));
}

static void bad_commands(void **state) {
    (void)state;
    run_result r;
    RUN(&r, "--version");
    expect_code(&r, 0);
    /* The version, then the commit the build was made from (or "unknown"). */
    const char *want = "porteiro " PORTEIRO_VERSION " (commit ";
    assert_memory_equal(r.out, want, strlen(want));
    const char *commit = r.out + strlen(want);
    assert_true(strlen(commit) > 2 && strcmp(commit + strlen(commit) - 2, ")\n") == 0);
    RUN(&r, "frobnicate");
    expect_usage_error(&r, "unknown command 'frobnicate'");
    const char *const none[] = {NULL};
    run_argv(&r, none);
    expect_usage_error(&r, "usage: porteiro");
}

/* ---- check on the memory backend ------------------------------------- */

static void check_memory_backend(void **state) {
    (void)state;
    run_result r;
    RUN(&r, "check", "--algorithm", "gcra", "--limit", "10", "--period", "1s", "k");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":100,"
           "\"retry_after_ms\":0}\n");
    RUN(&r, "check", "--algorithm=fixed_window", "--limit=10", "--period=1m", "--now-ms=1234000",
        "k");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":26000,"
           "\"retry_after_ms\":0}\n");
    /* Flags after the key, and a key that starts with a dash after "--". */
    RUN(&r, "check", "k", "--algorithm", "token_bucket", "--limit", "10", "--period", "1s",
        "--burst", "3", "--cost", "2", "--now-ms", "0");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":3,\"remaining\":1,\"reset_ms\":200,"
           "\"retry_after_ms\":0}\n");
    RUN(&r, "check", "--algorithm", "gcra", "--limit", "1", "--period", "1s", "--burst", "5",
        "--cost", "6", "--now-ms", "0", "--", "-dash");
    expect(&r, 1,
           "{\"allowed\":false,\"limit\":5,\"remaining\":5,\"reset_ms\":0,"
           "\"retry_after_ms\":-1}\n");
    RUN(&r, "check", "--algorithm", "sliding_window", "--limit", "50", "--period", "1m", "--cost",
        "0", "k");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":50,\"remaining\":50,\"reset_ms\":0,"
           "\"retry_after_ms\":0}\n");
}

/* Every DURATION form: a fixed window at t = 0 resets after one period. */
static void duration_forms(void **state) {
    (void)state;
    const char *const forms[] = {"250ms", "1s", "60s", "1m", "1h", "1d", "366d"};
    const long long ms[] = {250, 1000, 60000, 60000, 3600000, 86400000, 31622400000LL};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        run_result r;
        RUN(&r, "check", "--algorithm", "fixed_window", "--limit", "3", "--period", forms[i],
            "--now-ms", "0", "k");
        expect_code(&r, 0);
        assert_int_equal(json_int(r.out, "reset_ms"), ms[i]);
        assert_int_equal(json_int(r.out, "remaining"), 2);
    }
    const char *const bad[] = {
        "1",  "s", "0s", "-1s", "1.5s", "1w", "1 s", " 1s", "", "367d", "99999999999999999999s",
        "1S", "ms"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_result r;
        RUN(&r, "check", "--algorithm", "fixed_window", "--limit", "3", "--period", bad[i], "k");
        expect_usage_error(&r, "--period");
    }
}

/* ---- check against Redis ----------------------------------------------- */

static void check_redis_exit_codes(void **state) {
    (void)state;
    run_result r;
    const char *url = redis.url;
    for (int i = 0; i < 2; i++) {
        RUN(&r, "check", "--redis", url, "--algorithm", "fixed_window", "--limit", "2", "--period",
            "1h", "--now-ms", "7200000", "exit-codes");
        expect_code(&r, 0);
        assert_int_equal(json_int(r.out, "remaining"), 1 - i);
    }
    RUN(&r, "check", "--redis", url, "--algorithm", "fixed_window", "--limit", "2", "--period",
        "1h", "--now-ms", "7200500", "exit-codes");
    expect(&r, 1,
           "{\"allowed\":false,\"limit\":2,\"remaining\":0,\"reset_ms\":3599500,"
           "\"retry_after_ms\":3599500}\n");
    /* peek shows the state and changes nothing, twice over. */
    for (int i = 0; i < 2; i++) {
        RUN(&r, "peek", "--redis", url, "--algorithm", "fixed_window", "--limit", "2", "--period",
            "1h", "--now-ms", "7200100", "exit-codes");
        expect(&r, 0,
               "{\"allowed\":true,\"limit\":2,\"remaining\":0,\"reset_ms\":3599900,"
               "\"retry_after_ms\":0}\n");
    }
    RUN(&r, "peek", "--algorithm", "gcra", "--limit", "2", "--period", "1h", "--cost", "1", "k");
    expect_usage_error(&r, "unknown option '--cost'");
    /* The unix socket reaches the same state. */
    RUN(&r, "check", "--redis", redis.unix_url, "--algorithm", "fixed_window", "--limit", "2",
        "--period", "1h", "--now-ms", "7200500", "--cost", "0", "exit-codes");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":2,\"remaining\":0,\"reset_ms\":3599500,"
           "\"retry_after_ms\":0}\n");
}

/* Cluster and sentinel URLs: malformed is a usage error (2) naming the
 * part, nothing reachable is exit 3 naming what failed. */
static void cluster_and_sentinel_urls(void **state) {
    (void)state;
    static const struct {
        const char *url;
        int code;
        const char *part;
    } cases[] = {
        {"redis+cluster://a", 2, "node: host:port expected (no port)"},
        {"redis+cluster://a:1,b:0", 2, "node: port must be 1..65535"},
        {"redis+sentinel://a:1", 2, "sentinel URL needs /MASTER"},
        {"redis+sentinel://127.0.0.1:1/mymaster", 3, "sentinel: no sentinel answered"},
        {"redis+cluster://127.0.0.1:1", 3, "redis cluster: no node answered"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_result r;
        RUN(&r, "check", "--redis", cases[i].url, "--algorithm", "fixed_window", "--limit", "2",
            "--period", "1h", "k");
        expect_code(&r, cases[i].code);
        if (strstr(r.err, cases[i].part) == NULL)
            fail_msg("%s: stderr [%s] does not name '%s'", cases[i].url, r.err, cases[i].part);
        assert_string_equal(r.out, "");
    }
}

/* The token bucket example of docs/algorithms.md slowed down 100 times (L = 10 per
 * 100 s): Redis expires keys on its own clock, whatever --now-ms says, so
 * states must outlive a slow (sanitized) run by far. */
static void check_cost_and_clock(void **state) {
    (void)state;
    run_result r;
#define TB(r, cost, now)                                                                           \
    RUN(r, "check", "--redis", redis.url, "--algorithm", "token_bucket", "--limit", "10",          \
        "--period", "100s", "--burst", "3", "--cost", cost, "--now-ms", now, "cost-key")
    TB(&r, "2", "0");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":3,\"remaining\":1,\"reset_ms\":20000,"
           "\"retry_after_ms\":0}\n");
    TB(&r, "2", "0");
    expect(&r, 1,
           "{\"allowed\":false,\"limit\":3,\"remaining\":1,\"reset_ms\":20000,"
           "\"retry_after_ms\":10000}\n");
    TB(&r, "4", "10000");
    expect(&r, 1,
           "{\"allowed\":false,\"limit\":3,\"remaining\":2,\"reset_ms\":10000,"
           "\"retry_after_ms\":-1}\n");
    TB(&r, "0", "10000"); /* a peek changes nothing */
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":3,\"remaining\":2,\"reset_ms\":10000,"
           "\"retry_after_ms\":0}\n");
    TB(&r, "2", "10000");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":3,\"remaining\":0,\"reset_ms\":30000,"
           "\"retry_after_ms\":0}\n");
#undef TB
}

static void check_limits_policy(void **state) {
    (void)state;
    run_result r;
    /* Periods of minutes: the keys outlive the run on Redis's own clock. */
    const char *spec = "token_bucket 5/1m burst 10, fixed_window 20/1m";
    RUN(&r, "check", "--redis", redis.url, "--limits", spec, "--now-ms", "60000", "pol");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":60000,"
           "\"retry_after_ms\":0,\"limits\":["
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":12000,"
           "\"retry_after_ms\":0},"
           "{\"allowed\":true,\"limit\":20,\"remaining\":19,\"reset_ms\":60000,"
           "\"retry_after_ms\":0}],\"denied_by\":-1}\n");
    /* Cost 10 does not fit the bucket (9 left): denied by limit 0, and the
     * window, which would allow it, consumes nothing. */
    RUN(&r, "check", "--redis", redis.url, "--limits", spec, "--now-ms", "60000", "--cost", "10",
        "pol");
    expect(&r, 1,
           "{\"allowed\":false,\"limit\":10,\"remaining\":9,\"reset_ms\":60000,"
           "\"retry_after_ms\":12000,\"limits\":["
           "{\"allowed\":false,\"limit\":10,\"remaining\":9,\"reset_ms\":12000,"
           "\"retry_after_ms\":12000},"
           "{\"allowed\":true,\"limit\":20,\"remaining\":19,\"reset_ms\":60000,"
           "\"retry_after_ms\":0}],\"denied_by\":0}\n");
    RUN(&r, "check", "--redis", redis.url, "--limits", "fixed_window 1/1h, gcra 5/1m", "--now-ms",
        "0", "pol2");
    expect_code(&r, 0);
    RUN(&r, "check", "--redis", redis.url, "--limits", "fixed_window 1/1h, gcra 5/1m", "--now-ms",
        "0", "pol2");
    expect_code(&r, 1);
    assert_int_equal(json_int(r.out, "denied_by"), 0);
    assert_non_null(strstr(r.out, "{\"allowed\":true,\"limit\":5,\"remaining\":4,"));
}

static void reset_clears_state(void **state) {
    (void)state;
    run_result r;
    const char *url = redis.url;
    RUN(&r, "check", "--redis", url, "--algorithm", "gcra", "--limit", "1", "--period", "1h", "rk");
    expect_code(&r, 0);
    RUN(&r, "check", "--redis", url, "--algorithm", "gcra", "--limit", "1", "--period", "1h", "rk");
    expect_code(&r, 1);
    RUN(&r, "reset", "--redis", url, "--algorithm", "gcra", "--limit", "1", "--period", "1h", "rk");
    expect(&r, 0, "{\"reset\":true}\n");
    RUN(&r, "check", "--redis", url, "--algorithm", "gcra", "--limit", "1", "--period", "1h", "rk");
    expect_code(&r, 0);
    /* A policy resets every one of its limits. */
    const char *spec = "fixed_window 1/1h, token_bucket 1/1h";
    RUN(&r, "check", "--redis", url, "--limits", spec, "rk2");
    expect_code(&r, 0);
    RUN(&r, "check", "--redis", url, "--limits", spec, "rk2");
    expect_code(&r, 1);
    RUN(&r, "reset", "--redis", url, "--limits", spec, "rk2");
    expect(&r, 0, "{\"reset\":true}\n");
    RUN(&r, "check", "--redis", url, "--limits", spec, "rk2");
    expect_code(&r, 0);
    /* On the memory backend there is nothing to forget, and that is fine. */
    RUN(&r, "reset", "--algorithm", "gcra", "--limit", "1", "--period", "1h", "rk");
    expect(&r, 0, "{\"reset\":true}\n");
}

static void memory_counts_keys(void **state) {
    (void)state;
    run_result r;
    RUN(&r, "memory", "--redis", redis.url, "--prefix", "memtest");
    expect(&r, 0, "{\"keys\":0,\"bytes\":0}\n");
    const char *keys[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        RUN(&r, "check", "--redis", redis.url, "--prefix", "memtest", "--algorithm", "fixed_window",
            "--limit", "5", "--period", "1h", keys[i]);
        expect_code(&r, 0);
    }
    /* A key of another prefix, and one that only looks like it (glob). */
    RUN(&r, "check", "--redis", redis.url, "--prefix", "memtesX", "--algorithm", "fixed_window",
        "--limit", "5", "--period", "1h", "a");
    expect_code(&r, 0);
    RUN(&r, "memory", "--redis", redis.url, "--prefix", "memtest");
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "keys"), 3);
    long long bytes = json_int(r.out, "bytes");
    assert_true(bytes > 3 * 10 && bytes < 3 * 10000);
    RUN(&r, "memory", "--redis", redis.url, "--prefix", "memtes?");
    expect(&r, 0, "{\"keys\":0,\"bytes\":0}\n");
    RUN(&r, "memory");
    expect_usage_error(&r, "needs Redis");
}

static void env_redis_default(void **state) {
    (void)state;
    run_result r;
    setenv("PORTEIRO_REDIS", redis.url, 1);
    for (int i = 0; i < 2; i++) {
        RUN(&r, "check", "--algorithm", "fixed_window", "--limit", "1", "--period", "1h", "envk");
        expect_code(&r, i); /* shared state: it was Redis */
    }
    RUN(&r, "memory", "--prefix", "porteiro");
    expect_code(&r, 0);
    assert_true(json_int(r.out, "keys") >= 1);
    /* --redis "" picks the memory backend over the environment. */
    RUN(&r, "check", "--redis", "", "--algorithm", "fixed_window", "--limit", "1", "--period", "1h",
        "envk");
    expect_code(&r, 0);
}

/* Even after a failed assertion, the next tests run without the variable. */
static int unset_env(void **state) {
    (void)state;
    unsetenv("PORTEIRO_REDIS");
    return 0;
}

/* ---- Redis down: each --on-error mode ----------------------------------- */

static void unreachable_redis(void **state) {
    (void)state;
    test_redis gone;
    assert_int_equal(test_redis_start(&gone, NULL), 0);
    char url[320];
    snprintf(url, sizeof(url), "%s", gone.url);
    test_redis_stop(&gone); /* nothing listens there now */

#define DOWN(r, ...)                                                                               \
    RUN(r, "check", "--redis", url, "--algorithm", "gcra", "--limit", "10", "--period", "1s",      \
        __VA_ARGS__, "down")
    run_result r;
    RUN(&r, "check", "--redis", url, "--algorithm", "gcra", "--limit", "10", "--period", "1s",
        "down");
    expect_code(&r, 3);
    assert_string_equal(r.out, "");
    /* One line: where Redis was looked for, why, and what else to do. */
    char where[128];
    snprintf(where, sizeof(where),
             "porteiro check: no answer from Redis at 127.0.0.1:%d (redis: ", gone.port);
    assert_non_null(strstr(r.err, where));
    assert_non_null(strstr(r.err, "--redis '' to decide in this process's memory"));
    assert_ptr_equal(strchr(r.err, '\n'), r.err + strlen(r.err) - 1); /* one line */
    DOWN(&r, "--on-error", "error");
    expect_code(&r, 3);
    assert_string_equal(r.out, "");
    DOWN(&r, "--on-error", "open");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":10,\"reset_ms\":0,"
           "\"retry_after_ms\":0,\"fallback\":\"open\",\"reason\":\"redis unreachable\"}\n");
    /* Every fallback decision explains itself in one line on stderr. */
    assert_non_null(strstr(r.err, "(redis unreachable), so on_error open allowed it without "
                                  "checking any limit\n"));
    DOWN(&r, "--on-error", "closed");
    expect_code(&r, 1);
    assert_non_null(strstr(r.out, "\"allowed\":false,"));
    assert_non_null(strstr(r.out, ",\"fallback\":\"closed\",\"reason\":\"redis unreachable\"}\n"));
    DOWN(&r, "--on-error", "local", "--now-ms", "0");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":100,"
           "\"retry_after_ms\":0,\"fallback\":\"local\",\"reason\":\"redis unreachable\"}\n");
    assert_non_null(strstr(r.err, "on_error local decided in this process's memory with the "
                                  "full limits; allowed locally"));
    DOWN(&r, "--on-error", "local", "--now-ms", "0", "--cost", "11");
    expect_code(&r, 1);
    assert_non_null(strstr(r.out, "\"fallback\":\"local\""));
    assert_non_null(strstr(r.err, "cost 11 can never pass locally\n"));
#undef DOWN
    RUN(&r, "reset", "--redis", url, "--algorithm", "gcra", "--limit", "1", "--period", "1s", "k");
    expect_code(&r, 3);
    assert_string_equal(r.out, "");
    RUN(&r, "memory", "--redis", url);
    expect_code(&r, 3);
    RUN(&r, "bench", "--redis", url, "--requests", "10", "--connections", "1");
    expect_code(&r, 3);
}

/* Credentials in the URL: right ones work, wrong ones exit 3 whatever the
 * mode (a misconfiguration is not an outage to paper over). */
static void redis_credentials(void **state) {
    (void)state;
    test_redis locked;
    /* The password is set after start: the support's PING has none. */
    assert_int_equal(test_redis_start(&locked, NULL), 0);
    assert_int_equal(test_redis_cmd(&locked, NULL, 0, "CONFIG SET requirepass s3cret"), 0);
    char good[400], bad[400];
    snprintf(good, sizeof(good), "redis://:s3cret@127.0.0.1:%d", locked.port);
    snprintf(bad, sizeof(bad), "redis://:wrong@127.0.0.1:%d", locked.port);
    run_result r1, r2, r3;
    RUN(&r1, "check", "--redis", good, "--algorithm", "gcra", "--limit", "10", "--period", "1s",
        "k");
    RUN(&r2, "check", "--redis", bad, "--algorithm", "gcra", "--limit", "10", "--period", "1s",
        "k");
    RUN(&r3, "check", "--redis", bad, "--on-error", "open", "--algorithm", "gcra", "--limit", "10",
        "--period", "1s", "k");
    test_redis_stop(&locked);
    expect(&r1, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":100,"
           "\"retry_after_ms\":0}\n");
    expect_code(&r2, 3);
    assert_string_equal(r2.out, "");
    assert_non_null(strstr(r2.err, "auth"));
    assert_null(strstr(r2.err, "wrong")); /* the password is never echoed */
    expect_code(&r3, 3);
}

/* A frozen Redis: the check returns within its budget with the reason. */
static void frozen_redis_timeout(void **state) {
    (void)state;
    test_redis frozen;
    assert_int_equal(test_redis_start(&frozen, NULL), 0);
    test_redis_freeze(&frozen);
    run_result r;
    int64_t t0 = test_mono_ms();
    RUN(&r, "check", "--redis", frozen.url, "--timeout-ms", "100", "--on-error", "open",
        "--algorithm", "gcra", "--limit", "10", "--period", "1s", "k");
    int64_t took = test_mono_ms() - t0;
    test_redis_thaw(&frozen);
    test_redis_stop(&frozen);
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "\"fallback\":\"open\",\"reason\":\"redis timeout\"}"));
    /* connect (100) + check (100) budgets, plus process start-up */
    assert_true(took < 1500);
}

/* ---- bad input of every kind ------------------------------------------- */

static void bad_input(void **state) {
    (void)state;
    run_result r;
    static char long_key[10001];
    memset(long_key, 'x', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
#define CHECK_BAD(mention, ...)                                                                    \
    do {                                                                                           \
        RUN(&r, "check", __VA_ARGS__);                                                             \
        expect_usage_error(&r, mention);                                                           \
    } while (0)
#define GCRA "--algorithm", "gcra", "--limit", "10", "--period", "1s"
    CHECK_BAD("unknown option '--frob'", GCRA, "--frob", "k");
    CHECK_BAD("unknown option '-x'", GCRA, "-x", "k");
    CHECK_BAD("--limit needs a value", "--algorithm", "gcra", "--period", "1s", "k", "--limit");
    CHECK_BAD("--limit given twice", GCRA, "--limit", "5", "k");
    CHECK_BAD("missing KEY", GCRA);
    CHECK_BAD("unexpected argument 'k2'", GCRA, "k", "k2");
    CHECK_BAD("key is empty", GCRA, "");
    /* A key of any length is limited (under its digest), not an error. */
    RUN(&r, "check", GCRA, "--now-ms", "0", long_key);
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":100,"
           "\"retry_after_ms\":0}\n");
    CHECK_BAD("--limit '0'", "--algorithm", "gcra", "--limit", "0", "--period", "1s", "k");
    CHECK_BAD("--limit '-1'", "--algorithm", "gcra", "--limit", "-1", "--period", "1s", "k");
    CHECK_BAD("--limit 'x'", "--algorithm", "gcra", "--limit", "x", "--period", "1s", "k");
    CHECK_BAD("--limit '1e3'", "--algorithm", "gcra", "--limit", "1e3", "--period", "1s", "k");
    CHECK_BAD("--limit '\t5'", "--algorithm", "gcra", "--limit", "\t5", "--period", "1s", "k");
    CHECK_BAD("--limit '+5'", "--algorithm", "gcra", "--limit", "+5", "--period", "1s", "k");
    CHECK_BAD("--limit '10 '", "--algorithm", "gcra", "--limit", "10 ", "--period", "1s", "k");
    CHECK_BAD("--limit '1000000001'", "--algorithm", "gcra", "--limit", "1000000001", "--period",
              "1s", "k");
    CHECK_BAD("--limit '99999999999999999999'", "--algorithm", "gcra", "--limit",
              "99999999999999999999", "--period", "1s", "k");
    CHECK_BAD("--burst '0'", GCRA, "--burst", "0", "k");
    CHECK_BAD("--cost '-1'", GCRA, "--cost", "-1", "k");
    CHECK_BAD("--cost ''", GCRA, "--cost", "", "k");
    CHECK_BAD("--now-ms '-5'", GCRA, "--now-ms", "-5", "k");
    CHECK_BAD("--timeout-ms '0'", GCRA, "--timeout-ms", "0", "k");
    CHECK_BAD("unknown algorithm", "--algorithm", "leaky", "--limit", "1", "--period", "1s", "k");
    CHECK_BAD("--on-error 'maybe'", GCRA, "--on-error", "maybe", "k");
    CHECK_BAD("needs --algorithm, --limit and --period", "--algorithm", "gcra", "--limit", "1",
              "k");
    CHECK_BAD("needs --algorithm, --limit and --period", "k");
    CHECK_BAD("give one of", GCRA, "--limits", "gcra 1/1s", "k");
    CHECK_BAD("--limits 'gcra 1/1x'", "--limits", "gcra 1/1x", "k");
    CHECK_BAD("--limits ''", "--limits", "", "k");
    CHECK_BAD("--limits", "--limits", "gcra 1/1s,,", "k");
    CHECK_BAD("--policy needs --config", "--policy", "api", "k");
    CHECK_BAD("--config needs --policy", "--config", "/nonexistent.yaml", "k");
    CHECK_BAD("/nonexistent.yaml", "--config", "/nonexistent.yaml", "--policy", "api", "k");
    CHECK_BAD("redis", GCRA, "--redis", "http://example.com", "k");
    CHECK_BAD("prefix", GCRA, "--prefix", "", "k");
    /* Limits the library refuses: B x P too large for exact arithmetic. */
    CHECK_BAD("2^50", "--algorithm", "gcra", "--limit", "1000000000", "--period", "366d", "k");
#undef GCRA
#undef CHECK_BAD
    RUN(&r, "reset", "--algorithm", "gcra", "--limit", "1", "--period", "1s", "--cost", "1", "k");
    expect_usage_error(&r, "unknown option '--cost'");
    RUN(&r, "reset", "--algorithm", "gcra", "--limit", "1", "--period", "1s");
    expect_usage_error(&r, "missing KEY");
    RUN(&r, "memory", "extra");
    expect_usage_error(&r, "unexpected argument 'extra'");
    RUN(&r, "bench", "--requests", "10");
    expect_usage_error(&r, "needs Redis");
    RUN(&r, "bench", "--redis", redis.url, "--connections", "0");
    expect_usage_error(&r, "--connections '0'");
    RUN(&r, "bench", "--redis", redis.url, "--connections", "1000", "--pipeline", "1000");
    expect_usage_error(&r, "at most 100000");
    RUN(&r, "bench", "--redis", redis.url, "--keys", "0");
    expect_usage_error(&r, "--keys '0'");
    RUN(&r, "bench", "--redis", redis.url, "--redis-module", "on");
    expect_usage_error(&r, "--redis-module 'on': expected auto or off");
    RUN(&r, "bench", "--redis", redis.url, "--batch", "4", "--pipeline", "4");
    expect_usage_error(&r, "--batch and --pipeline cannot be used together");
    RUN(&r, "bench", "--redis", redis.url, "--connections", "1000", "--batch", "1000");
    expect_usage_error(&r, "--connections x --batch must be at most 100000");
    RUN(&r, "script", "--limit", "1");
    expect_usage_error(&r, "unknown option '--limit'");
}

/* ---- bench and script ---------------------------------------------------- */

static void bench_counts_exactly(void **state) {
    (void)state;
    run_result r;
    /* One key, 10 per hour, 103 checks over 3 connections x 4 in flight:
     * exactly 10 allowed, whatever the interleaving. */
    RUN(&r, "bench", "--redis", redis.url, "--prefix", "benchtest", "--algorithm", "fixed_window",
        "--limit", "10", "--period", "1h", "--connections", "3", "--pipeline", "4", "--requests",
        "103", "--keys", "1");
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "allowed"), 10);
    assert_int_equal(json_int(r.out, "denied"), 93);
    assert_int_equal(json_int(r.out, "errors"), 0);
    assert_true(json_int(r.out, "ops_per_sec") > 0);
    assert_true(json_int(r.out, "p99_us") >= json_int(r.out, "p50_us"));
    assert_true(json_int(r.out, "p50_us") > 0);
    assert_string_equal(strchr(r.out, '\n'), "\n"); /* one line, one object */
    /* The same through porteiro_check_many calls of 8: the same JSON line,
     * the same exact count. */
    RUN(&r, "bench", "--redis", redis.url, "--prefix", "benchbatch", "--algorithm", "fixed_window",
        "--limit", "10", "--period", "1h", "--connections", "3", "--batch", "8", "--requests",
        "103", "--keys", "1");
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "allowed"), 10);
    assert_int_equal(json_int(r.out, "denied"), 93);
    assert_int_equal(json_int(r.out, "errors"), 0);
}

static void script_is_the_checks_script(void **state) {
    (void)state;
    run_result r;
    RUN(&r, "script");
    expect_code(&r, 0);
    size_t len;
    const char *text = porteiro_script(&len);
    assert_int_equal(strlen(r.out), len);
    assert_memory_equal(r.out, text, len);
    assert_non_null(strstr(r.out, "redis.call"));
    /* Per algorithm: the smaller script a single-algorithm check runs. */
    RUN(&r, "script", "--algorithm", "gcra");
    expect_code(&r, 0);
    const char *gcra = porteiro_script_for(PORTEIRO_GCRA, &len);
    assert_int_equal(strlen(r.out), len);
    assert_memory_equal(r.out, gcra, len);
    assert_true(len < strlen(text));
    RUN(&r, "script", "--algorithm", "nope");
    expect_usage_error(&r, "unknown algorithm");
}

/* ---- acquire / release (concurrency leases) ------------------------ */

/* Copies the "lease" id out of an acquire's JSON ("" when it is null). */
static void lease_of(const run_result *r, char *id) {
    const char *at = strstr(r->out, "\"lease\":\"");
    id[0] = '\0';
    if (at != NULL && sscanf(at + 9, "%32[0-9a-f]", id) != 1)
        id[0] = '\0';
}

static void expect_lease(const run_result *r, int code, const char *before, const char *id) {
    char want[256];
    snprintf(want, sizeof(want), "%s,\"lease\":%s%s%s}\n", before, id ? "\"" : "", id ? id : "null",
             id ? "\"" : "");
    expect(r, code, want);
}

static void leases(void **state) {
    (void)state;
    run_result r;
    char a[40], b[40];
    const char *url = redis.url;
#define ACQUIRE(r, now)                                                                            \
    RUN(r, "acquire", "--redis", url, "--prefix", "cl", "--limit", "2", "--lease", "1s",           \
        "--now-ms", now, "job")
    ACQUIRE(&r, "5000");
    lease_of(&r, a);
    assert_int_equal(strlen(a), 32);
    expect_lease(&r, 0,
                 "{\"allowed\":true,\"limit\":2,\"remaining\":1,\"reset_ms\":1000,"
                 "\"retry_after_ms\":0",
                 a);
    ACQUIRE(&r, "5100");
    lease_of(&r, b);
    assert_string_not_equal(a, b);
    expect_lease(&r, 0,
                 "{\"allowed\":true,\"limit\":2,\"remaining\":0,\"reset_ms\":1000,"
                 "\"retry_after_ms\":0",
                 b);
    ACQUIRE(&r, "5200"); /* full: the first lease expires at 6000 */
    expect_lease(&r, 1,
                 "{\"allowed\":false,\"limit\":2,\"remaining\":0,\"reset_ms\":900,"
                 "\"retry_after_ms\":800",
                 NULL);
    RUN(&r, "release", "--redis", url, "--prefix", "cl", "--lease", a, "--now-ms", "5300", "job");
    expect(&r, 0, "{\"released\":true}\n");
    RUN(&r, "release", "--redis", url, "--prefix", "cl", "--lease", a, "--now-ms", "5300", "job");
    expect(&r, 1, "{\"released\":false}\n"); /* unknown now */
    RUN(&r, "release", "--redis", url, "--prefix", "other", "--lease", b, "--now-ms", "5300",
        "job");
    expect(&r, 1, "{\"released\":false}\n"); /* another prefix: another key */
    RUN(&r, "release", "--redis", url, "--prefix", "cl", "--lease", b, "--now-ms", "6100", "job");
    expect(&r, 1, "{\"released\":false}\n"); /* expired at 6100 */
    ACQUIRE(&r, "6100");
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "remaining"), 1);
#undef ACQUIRE

    /* The memory backend works too (leases end with the process). */
    RUN(&r, "acquire", "--redis", "", "--limit", "1", "--lease", "250ms", "job");
    expect_code(&r, 0);
    /* Bad input: exit 2, a message naming what. */
    RUN(&r, "acquire", "--limit", "1", "job");
    expect_usage_error(&r, "--lease");
    RUN(&r, "acquire", "--lease", "1s", "job");
    expect_usage_error(&r, "--limit");
    RUN(&r, "acquire", "--limit", "10001", "--lease", "1s", "job");
    expect_usage_error(&r, "10000");
    RUN(&r, "acquire", "--limit", "1", "--lease", "1y", "job");
    expect_usage_error(&r, "--lease");
    RUN(&r, "acquire", "--limit", "1", "--lease", "1s");
    expect_usage_error(&r, "KEY");
    RUN(&r, "release", "job");
    expect_usage_error(&r, "--lease");
    RUN(&r, "release", "--lease", "not-an-id", "job");
    expect_usage_error(&r, "32 lowercase hex");
    RUN(&r, "release", "--lease", "1s", "--limit", "1", "job");
    expect_usage_error(&r, "--limit");
    /* Redis down: exit 3 (or what --on-error says). */
    RUN(&r, "acquire", "--redis", "redis://127.0.0.1:1", "--limit", "1", "--lease", "1s", "job");
    expect_code(&r, 3);
    RUN(&r, "acquire", "--redis", "redis://127.0.0.1:1", "--on-error", "closed", "--limit", "1",
        "--lease", "1s", "job");
    expect_code(&r, 1);
    assert_non_null(strstr(r.out, "\"lease\":null,\"fallback\":\"closed\""));
}

/* ---- --config / --policy ---------------------------------------------- */

static char config_path[64]; /* the file a config test wrote; removed after */

/* Writes yaml (a format with %s for the Redis URL) to config_path; skips
 * the test when this tree has no config support yet. */
static void write_config(const char *fmt) {
    char yaml[1024], err[256];
    snprintf(yaml, sizeof(yaml), fmt, redis.url);
    porteiro_config *cfg = porteiro_config_parse(yaml, strlen(yaml), "inline", err, sizeof(err));
    if (cfg == NULL && strstr(err, "not supported") != NULL) {
        print_message("config not supported yet: %s\n", err);
        skip();
    }
    assert_non_null(cfg);
    porteiro_config_free(cfg);
    snprintf(config_path, sizeof(config_path), "/tmp/porteiro-cli-XXXXXX");
    int fd = mkstemp(config_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
}

static int remove_config(void **state) {
    (void)state;
    if (config_path[0] != '\0')
        unlink(config_path);
    config_path[0] = '\0';
    return 0;
}

static void config_policy(void **state) {
    (void)state;
    write_config("redis:\n  url: %s\nprefix: cfgtest\npolicies:\n  api:\n    limits:\n"
                 "      - token_bucket 5/1m burst 10\n      - fixed_window 1000/1h\n");
    const char *path = config_path;
    run_result r;
    RUN(&r, "check", "--config", path, "--policy", "api", "--now-ms", "3600000", "cfgkey");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":3600000,"
           "\"retry_after_ms\":0,\"limits\":["
           "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":12000,"
           "\"retry_after_ms\":0},"
           "{\"allowed\":true,\"limit\":1000,\"remaining\":999,\"reset_ms\":3600000,"
           "\"retry_after_ms\":0}],\"denied_by\":-1}\n");
    /* The file's Redis and prefix were used: the keys are there. */
    RUN(&r, "memory", "--config", path);
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "keys"), 2);
    RUN(&r, "check", "--config", path, "--policy", "nope", "cfgkey");
    expect_usage_error(&r, "no policy 'nope'");
    RUN(&r, "reset", "--config", path, "--policy", "api", "cfgkey");
    expect(&r, 0, "{\"reset\":true}\n");
    /* The keys are gone; the fixed window's reset mark stays to the end of
     * its window (docs/quota_leasing.md: no lease's late give-back comes
     * off the fresh count). */
    RUN(&r, "memory", "--config", path);
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "keys"), 1);
    /* --prefix beats the file's. */
    RUN(&r, "check", "--config", path, "--policy", "api", "--prefix", "cfgother", "cfgkey");
    expect_code(&r, 0);
    RUN(&r, "memory", "--config", path, "--prefix", "cfgother");
    assert_int_equal(json_int(r.out, "keys"), 2);
}

/* Shadow: reported, never enforced. A policy's on_error: used unless the
 * --on-error flag says otherwise. */
static void config_shadow_and_on_error(void **state) {
    (void)state;
    write_config("redis:\n  url: %s\nprefix: cfgshadow\npolicies:\n"
                 "  trial:\n    shadow: true\n    limits:\n      - fixed_window 1/1h\n"
                 "  strict:\n    on_error: closed\n    limits:\n      - fixed_window 5/1h\n");
    run_result r;
    RUN(&r, "check", "--config", config_path, "--policy", "trial", "--now-ms", "0", "sk");
    expect(&r, 0,
           "{\"allowed\":true,\"limit\":1,\"remaining\":0,\"reset_ms\":3600000,"
           "\"retry_after_ms\":0,\"limits\":[{\"allowed\":true,\"limit\":1,"
           "\"remaining\":0,\"reset_ms\":3600000,\"retry_after_ms\":0}],"
           "\"denied_by\":-1,\"shadow\":true,\"would_deny\":false}\n");
    RUN(&r, "check", "--config", config_path, "--policy", "trial", "--now-ms", "0", "sk");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "{\"allowed\":true,"));
    assert_non_null(strstr(r.out, "\"denied_by\":0,\"shadow\":true,\"would_deny\":true}"));

    test_redis gone;
    assert_int_equal(test_redis_start(&gone, NULL), 0);
    char dead[320];
    snprintf(dead, sizeof(dead), "%s", gone.url);
    test_redis_stop(&gone);
    RUN(&r, "check", "--config", config_path, "--policy", "strict", "--redis", dead, "k");
    expect_code(&r, 1);
    assert_non_null(strstr(r.out, "\"fallback\":\"closed\""));
    RUN(&r, "check", "--config", config_path, "--policy", "strict", "--redis", dead, "--on-error",
        "open", "k");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "\"fallback\":\"open\""));
    RUN(&r, "check", "--config", config_path, "--policy", "strict", "--redis", dead, "--on-error",
        "error", "k");
    expect_code(&r, 3);
}

/* One node: the counters named policies kept at their clients' plain keys
 * (before each had its own keys: what `check --limits` writes) are copied
 * into the policies' by migrate-keys --config (--policy: that one only):
 * a client denied before the upgrade is denied after it; a second run
 * copies nothing. */
static void config_migrate_policy_keys(void **state) {
    (void)state;
    write_config("redis:\n  url: %s\nprefix: cfgmig\npolicies:\n"
                 "  api:\n    limits: [fixed_window 2/1h, gcra 5/1h]\n"
                 "  web:\n    limits: [fixed_window 3/1h]\n");
    run_result r;
    for (int i = 0; i < 2; i++) { /* the older version: api's checks at the plain keys */
        RUN(&r, "check", "--redis", redis.url, "--prefix", "cfgmig", "--limits",
            "fixed_window 2/1h, gcra 5/1h", "mk1");
        expect_code(&r, 0);
    }
    RUN(&r, "check", "--config", config_path, "--policy", "api", "--cost", "0", "mk1");
    expect_code(&r, 0); /* this version: api's own keys, empty */
    RUN(&r, "migrate-keys", "--config", config_path, "--policy", "api");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, ",\"policies\":{\"scanned\":"));
    assert_non_null(strstr(r.out, "\"copied\":2,\"merged\":0}}\n"));
    RUN(&r, "check", "--config", config_path, "--policy", "api", "mk1");
    expect_code(&r, 1); /* denied, as it was before the upgrade */
    assert_int_equal(json_int(r.out, "denied_by"), 0);
    RUN(&r, "check", "--config", config_path, "--policy", "web", "--cost", "0", "mk1");
    expect_code(&r, 0);
    assert_int_equal(json_int(r.out, "remaining"), 3); /* --policy api: web untouched */
    RUN(&r, "migrate-keys", "--config", config_path, "--policy", "api");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "\"copied\":0,\"merged\":0}}\n"));
    RUN(&r, "migrate-keys", "--config", config_path);
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "\"copied\":1,\"merged\":0}}\n")); /* web's fixed window */
    RUN(&r, "check", "--config", config_path, "--policy", "web", "--cost", "0", "mk1");
    assert_int_equal(json_int(r.out, "remaining"), 1);
    RUN(&r, "migrate-keys", "--config", config_path, "--policy", "nope");
    expect_usage_error(&r, "no policy 'nope'");
    RUN(&r, "migrate-keys", "--redis", redis.url, "--policy", "api");
    expect_usage_error(&r, "--policy needs --config");
}

static void config_errors(void **state) {
    (void)state;
    write_config("prefix: x\n"); /* a valid file, overwritten below */
    FILE *f = fopen(config_path, "w");
    assert_non_null(f);
    fputs("policies:\n  api:\n    limits:\n      - bogus 1/1s\n", f);
    fclose(f);
    run_result r;
    RUN(&r, "check", "--config", config_path, "--policy", "api", "k");
    expect_usage_error(&r, config_path);
    RUN(&r, "memory", "--config", config_path);
    expect_usage_error(&r, config_path);
}

static int group_setup(void **state) {
    (void)state;
    cli = getenv("PORTEIRO_CLI");
    if (cli == NULL || access(cli, X_OK) != 0) {
        fprintf(stderr, "test_cli: set PORTEIRO_CLI to the porteiro binary\n");
        return -1;
    }
    unsetenv("PORTEIRO_REDIS");
    return test_redis_start(&redis, NULL);
}

static int group_teardown(void **state) {
    (void)state;
    test_redis_stop(&redis);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_everywhere),
        cmocka_unit_test(bad_commands),
        cmocka_unit_test(check_memory_backend),
        cmocka_unit_test(duration_forms),
        cmocka_unit_test(check_redis_exit_codes),
        cmocka_unit_test(cluster_and_sentinel_urls),
        cmocka_unit_test(check_cost_and_clock),
        cmocka_unit_test(check_limits_policy),
        cmocka_unit_test(reset_clears_state),
        cmocka_unit_test(memory_counts_keys),
        cmocka_unit_test_teardown(env_redis_default, unset_env),
        cmocka_unit_test(unreachable_redis),
        cmocka_unit_test(redis_credentials),
        cmocka_unit_test(frozen_redis_timeout),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(bench_counts_exactly),
        cmocka_unit_test(script_is_the_checks_script),
        cmocka_unit_test(leases),
        cmocka_unit_test_teardown(config_policy, remove_config),
        cmocka_unit_test_teardown(config_shadow_and_on_error, remove_config),
        cmocka_unit_test_teardown(config_migrate_policy_keys, remove_config),
        cmocka_unit_test_teardown(config_errors, remove_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
