/* test_alloc_fail.c — every allocation of representative runs made to fail,
 * one at a time: config load, handle creation, blocking and event-loop
 * checks, batches, leases, Redis Cluster routing, porteirod answering a
 * request. Each run is a child process (fork) in which the n-th allocation
 * of porteiro's own code fails (failalloc.c); it must end normally: no
 * crash, no hang, and (under ASan) no leak, whatever failed. The parent
 * sweeps n over every allocation the scenario makes (counted in a first
 * run where none fails) and reports how many runs saw the failure come out
 * as an error (a status, an HTTP 5xx) and how many sites were exercised.
 *
 *   test_alloc_fail            all scenarios (starts its own Redis servers)
 *   test_alloc_fail NAME       one scenario
 *   test_alloc_fail NAME N     one run of it, allocation N failing, in-process */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin/admin.h"
#include "app/app.h"
#include "failalloc.h"
#include "porteiro.h"
#include "porteiro_config.h"
#include "porteiro_libevent.h"
#include "redis_server.h"
#include "ops/settings.h"

/* LeakSanitizer's check, present only in a sanitized build. */
extern void __lsan_do_leak_check(void) __attribute__((weak));

static test_redis redis;
static test_cluster cluster;
static int run_no; /* makes every run's keys its own */

/* A scenario returns 0 when everything succeeded, 1 when an error came out
 * (the injected failure, surfaced); it must never crash. */
typedef int scenario_fn(void);

static const porteiro_limit gcra = {PORTEIRO_GCRA, 100, 1000, 0};
static const porteiro_limit limits2[] = {{PORTEIRO_TOKEN_BUCKET, 10, 1000, 20},
                                         {PORTEIRO_SLIDING_WINDOW, 100, 60000, 0}};

static const char yaml[] =
    "redis:\n  url: redis://127.0.0.1:1\n  on_error: local\n  local_divisor: 4\nprefix: api\n"
    "trusted_proxies:\n  - 10.0.0.0/8\n"
    "policies:\n"
    "  api:\n    limits:\n      - token_bucket 5/1s burst 10\n      - fixed_window 1000/1h\n"
    "    key: header X-Api-Key\n"
    "  ip:\n    limits:\n      - gcra 3/1s\n    deny_status: 429\n";

static int config_load(void) {
    char err[256];
    porteiro_config *cfg =
        porteiro_config_parse(yaml, sizeof(yaml) - 1, "a.yaml", err, sizeof(err));
    if (cfg == NULL)
        return 1;
    porteiro_config_free(cfg);
    pd_settings *s = pd_settings_parse(yaml, sizeof(yaml) - 1, "a.yaml", err, sizeof(err));
    if (s == NULL)
        return 1;
    pd_settings_unref(s);
    return 0;
}

static porteiro_t *open_handle(const char *url) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR; /* a failure must come out */
    o.deny_cache_keys = 16;
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 2000;
    return porteiro_new(&o, NULL, NULL, 0);
}

/* Checks, a policy, a batch, a refund, a reset and a lease on one handle. */
static int blocking_checks(const char *url) {
    porteiro_t *p = open_handle(url);
    if (p == NULL)
        return 1;
    char key[64];
    snprintf(key, sizeof(key), "k%d", run_no);
    porteiro_decision d[4];
    porteiro_status st[4];
    int bad = porteiro_check(p, &gcra, key, 1, &d[0]) != PORTEIRO_OK;
    porteiro_request reqs[4];
    for (int i = 0; i < 4; i++)
        reqs[i] = (porteiro_request){.limits = limits2,
                                     .nlimits = 2,
                                     .key = key,
                                     .key_len = strlen(key),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    bad |= porteiro_check_many(p, reqs, 4, d, st) != PORTEIRO_OK;
    bad |= porteiro_refund(p, &reqs[0], &d[0]) != PORTEIRO_OK;
    bad |= porteiro_reset(p, &(porteiro_request){.limits = limits2,
                                                 .nlimits = 2,
                                                 .key = key,
                                                 .key_len = strlen(key)}) != PORTEIRO_OK;
    char id[PORTEIRO_LEASE_ID_LEN + 1];
    bool released = false;
    if (porteiro_acquire(p, 3, 1000, key, strlen(key), PORTEIRO_NOW, &d[0], id) == PORTEIRO_OK)
        bad |= porteiro_release(p, key, strlen(key), id, PORTEIRO_NOW, &released) != PORTEIRO_OK;
    else
        bad = 1;
    porteiro_free(p);
    return bad;
}

static int memory_handle(void) {
    return blocking_checks(NULL);
}
static int redis_blocking(void) {
    return blocking_checks(redis.url);
}
static int cluster_blocking(void) {
    return blocking_checks(cluster.url);
}

typedef struct async_tally {
    int answers, errors, want;
    struct event_base *base;
} async_tally;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    async_tally *t = arg;
    (void)p;
    (void)d;
    t->answers++;
    t->errors += st != PORTEIRO_OK;
    if (t->answers == t->want)
        event_base_loopbreak(t->base);
}

/* Eight checks on the loop (they leave as batches), each answered once. */
static int redis_async(void) {
    struct event_base *base = porteiro_event_base_new();
    if (base == NULL)
        return 1;
    porteiro_t *p = open_handle(redis.url);
    int bad = 1;
    if (p != NULL && porteiro_attach_libevent(p, base) == PORTEIRO_OK) {
        char key[64];
        snprintf(key, sizeof(key), "a%d", run_no);
        porteiro_request r = {.limits = &gcra,
                              .nlimits = 1,
                              .key = key,
                              .key_len = strlen(key),
                              .cost = 1,
                              .now_ms = PORTEIRO_NOW,
                              .max_wait_ms = 0};
        async_tally t = {.base = base, .want = 8};
        int sent = 0;
        for (int i = 0; i < 8; i++)
            sent += porteiro_check_async(p, &r, on_answer, &t) == PORTEIRO_OK;
        t.want = sent;
        struct timeval tv = {3, 0};
        event_base_loopexit(base, &tv);
        if (sent > 0)
            event_base_dispatch(base);
        if (t.answers != sent) {
            fprintf(stderr, "alloc: %d async checks sent, %d answered\n", sent, t.answers);
            abort(); /* a check lost: never acceptable */
        }
        bad = sent != 8 || t.errors > 0;
    }
    porteiro_free(p);
    event_base_free(base);
    return bad;
}

typedef struct http_tally {
    int answers, status;
    struct event_base *base;
} http_tally;

static void on_response(pd_response *resp, void *arg) {
    http_tally *t = arg;
    t->answers++;
    t->status = resp->status;
    if (t->base != NULL)
        event_base_loopbreak(t->base);
}

/* porteirod's app answering /v1/check, /v1/auth and /metrics. */
static int daemon_request(const char *url) {
    char err[256], text[1024];
    snprintf(text, sizeof(text),
             "policies:\n  api:\n    limits:\n      - gcra 10/1s\n    key: header X-Key\n");
    pd_settings *s = pd_settings_parse(text, strlen(text), "d.yaml", err, sizeof(err));
    if (s == NULL)
        return 1;
    struct event_base *base = porteiro_event_base_new();
    porteiro_t *p = open_handle(url);
    pd_shared *shared = pd_shared_new(s, url != NULL);
    pd_app *app = NULL;
    if (shared == NULL)
        pd_settings_unref(s);
    if (p != NULL && base != NULL && porteiro_attach_libevent(p, base) == PORTEIRO_OK &&
        shared != NULL)
        app = pd_app_new(shared, p);
    int bad = app == NULL;
    char key[64], body[128];
    snprintf(key, sizeof(key), "d%d", run_no);
    snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"%s\",\"cost\":1}", key);
    pd_header hdr = {"X-Key", key};
    const pd_request reqs[] = {
        {PD_POST, "/v1/check", NULL, NULL, 0, "127.0.0.1", body, strlen(body)},
        {PD_GET, "/v1/auth", "policy=api", &hdr, 1, "127.0.0.1", NULL, 0},
        {PD_GET, "/metrics", NULL, NULL, 0, "127.0.0.1", NULL, 0},
    };
    for (size_t i = 0; app != NULL && i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        http_tally t = {.base = base};
        pd_app_handle(app, &reqs[i], on_response, &t);
        struct timeval tv = {3, 0};
        if (t.answers == 0) {
            event_base_loopexit(base, &tv);
            event_base_dispatch(base);
        }
        if (t.answers != 1) {
            fprintf(stderr, "alloc: %s answered %d times\n", reqs[i].path, t.answers);
            abort();
        }
        bad |= t.status >= 500;
    }
    pd_app_free(app);
    porteiro_free(p);
    pd_shared_free(shared);
    if (base != NULL)
        event_base_free(base);
    return bad;
}

static int daemon_memory(void) {
    return daemon_request(NULL);
}
static int daemon_redis(void) {
    return daemon_request(redis.url);
}

/* The top keys (limiter/top.c: a name's first decision allocates its
 * structure; the merge of porteiro_top_get) and the admin listener's
 * answers (admin/admin.c). */
static int top_admin(void) {
    char err[256];
    static const char text[] = "top:\n  keys: 8\npolicies:\n  api:\n    limits:\n"
                               "      - gcra 10/1s\n";
    pd_settings *s = pd_settings_parse(text, sizeof(text) - 1, "t.yaml", err, sizeof(err));
    if (s == NULL)
        return 1;
    porteiro_t *p = porteiro_new(pd_settings_options(s), NULL, err, sizeof(err));
    pd_shared *shared = pd_shared_new(s, false);
    if (shared == NULL)
        pd_settings_unref(s);
    int bad = p == NULL || shared == NULL || pd_shared_add_limiter(shared, p) != 0;
    for (int i = 0; p != NULL && shared != NULL && i < 30; i++) { /* s lives in shared */
        porteiro_decision d;
        char key[16];
        snprintf(key, sizeof(key), "k%d", i % 12);
        bad |= porteiro_check_request(p,
                                      &(porteiro_request){.policy = s->policies[0].policy,
                                                          .key = key,
                                                          .key_len = strlen(key),
                                                          .cost = 1,
                                                          .now_ms = PORTEIRO_NOW},
                                      &d) != PORTEIRO_OK;
    }
    porteiro_top_key keys[8];
    size_t n;
    int64_t total;
    bad |= p != NULL && porteiro_top_get(&p, 1, "api", PORTEIRO_TOP_ALLOWED, PORTEIRO_TOP_1M,
                                         PORTEIRO_NOW, keys, 8, &n, &total) != PORTEIRO_OK;
    pd_admin *a = shared != NULL ? pd_admin_new(shared, s, "t.yaml", "127.0.0.1") : NULL;
    bad |= a == NULL;
    struct evbuffer *body = evbuffer_new();
    bad |= body == NULL;
    static const char *const paths[] = {"/v1/top", "/v1/status", "/v1/config", "/"};
    for (size_t i = 0; a != NULL && body != NULL && i < 4; i++) {
        pd_admin_answer ans;
        evbuffer_drain(body, evbuffer_get_length(body));
        pd_admin_serve(a, paths[i], "n=3", body, &ans);
        bad |= ans.status != 200;
    }
    if (body != NULL)
        evbuffer_free(body);
    pd_admin_free(a);
    porteiro_free(p);
    pd_shared_free(shared);
    return bad != 0;
}

static const struct {
    const char *name;
    scenario_fn *fn;
    bool cluster;
} scenarios[] = {
    {"config_load", config_load, false},          {"memory_handle", memory_handle, false},
    {"redis_blocking", redis_blocking, false},    {"redis_async", redis_async, false},
    {"daemon_memory", daemon_memory, false},      {"daemon_redis", daemon_redis, false},
    {"cluster_blocking", cluster_blocking, true}, {"top_admin", top_admin, false},
};

/* Runs fn in a child with the n-th allocation failing (0: none). Returns the
 * child's result (0/1), or -1 when it crashed, leaked or hung; *count gets
 * the allocations the child made (through a pipe). */
static int run_child(scenario_fn *fn, long n, long *count, int *sites) {
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        /* The servers' fatal-signal handlers (redis_server.c) are the
         * parent's: a crash here must not stop them. */
        static const int fatal[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT};
        for (size_t k = 0; k < sizeof(fatal) / sizeof(fatal[0]); k++)
            signal(fatal[k], SIG_DFL);
        alarm(20);
        failalloc_arm(n);
        int rc = fn();
        long got[2] = {failalloc_count(), failalloc_sites()};
        failalloc_arm(0);
        if (write(fds[1], got, sizeof(got)) != (ssize_t)sizeof(got))
            _exit(3);
        close(fds[1]);
        /* _exit: the parent's atexit handlers would stop its servers. A
         * leak check first, where LeakSanitizer is linked in. */
        if (__lsan_do_leak_check != NULL)
            __lsan_do_leak_check();
        _exit(rc);
    }
    close(fds[1]);
    long got[2] = {0, 0};
    ssize_t r = read(fds[0], got, sizeof(got));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (count != NULL)
        *count = r == (ssize_t)sizeof(got) ? got[0] : 0;
    if (sites != NULL)
        *sites = (int)got[1];
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 1) {
        fprintf(stderr, "alloc: run with allocation %ld failing: %s %d\n", n,
                WIFSIGNALED(status) ? "killed by signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return -1;
    }
    return WEXITSTATUS(status);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    bool need_cluster = only == NULL || strcmp(only, "cluster_blocking") == 0;
    if (test_redis_start(&redis, NULL) != 0) {
        fprintf(stderr, "alloc: redis-server did not start\n");
        return 1;
    }
    if (need_cluster &&
        (test_cluster_start(&cluster, 3) != 0 || test_cluster_wait_ok(&cluster, 10000) != 0)) {
        fprintf(stderr, "alloc: the cluster did not start\n");
        test_redis_stop(&redis);
        return 1;
    }
    if (argc > 2) { /* NAME N: that one run, in this process (for a debugger) */
        for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
            if (strcmp(only, scenarios[i].name) == 0) {
                failalloc_arm(atol(argv[2]));
                printf("alloc: %s with allocation %s failing: %d\n", only, argv[2],
                       scenarios[i].fn());
            }
        test_cluster_stop(&cluster);
        test_redis_stop(&redis);
        return 0;
    }
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        if (only != NULL && strcmp(only, scenarios[i].name) != 0)
            continue;
        if (scenarios[i].cluster && !need_cluster)
            continue;
        long total = 0;
        int sites = 0;
        run_no++;
        if (run_child(scenarios[i].fn, 0, &total, &sites) != 0 || total == 0) {
            fprintf(stderr, "alloc: %s fails without any failure injected\n", scenarios[i].name);
            failed++;
            continue;
        }
        long surfaced = 0, absorbed = 0, broken = 0;
        for (long n = 1; n <= total; n++) {
            run_no++;
            int rc = run_child(scenarios[i].fn, n, NULL, NULL);
            if (rc < 0)
                broken++;
            else if (rc == 1)
                surfaced++;
            else
                absorbed++;
        }
        printf("alloc: %-16s %4ld allocations (%3d sites): %ld surfaced as an error, %ld absorbed, "
               "%ld crashed/leaked/hung\n",
               scenarios[i].name, total, sites, surfaced, absorbed, broken);
        if (broken == 0)
            passed++;
        else
            failed++;
    }
    if (need_cluster)
        test_cluster_stop(&cluster);
    test_redis_stop(&redis);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
