/* test_daemon_envoy_http.c — porteirod's envoy service as a process:
 * POST /json and GET /healthcheck on a real redis-server, --test-config
 * on envoy ratelimit's files (exit 2, FILE:LINE), reload by watching the
 * folder and by SIGHUP (a bad file keeps the running config), 16 client
 * processes against one limit (exactly L pass), and --envoy-env. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envoy/envoy_env.h"
#include "http_client.h"
#include "redis_server.h"
#include "ops/settings.h"
#include "test_util.h"

static char rules_dir[256];

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    /* Written aside and renamed in: the watcher never reads half a file. */
    char tmp[520];
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
}

static const char *const API_RULES = "domain: api\n"
                                     "descriptors:\n"
                                     "  - key: user\n"
                                     "    rate_limit:\n"
                                     "      unit: hour\n"
                                     "      requests_per_unit: 3\n";

static void start(test_daemon *d, const char *extra) {
    snprintf(rules_dir, sizeof(rules_dir), "/tmp/porteiro-envoy-XXXXXX");
    assert_non_null(mkdtemp(rules_dir));
    write_file(rules_dir, "api.yaml", API_RULES);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nredis:\n  url: %s\n  on_error: error\n"
             /* on_error: error turns a budget missed on a loaded machine (a
              * sanitizer build) into a 503; these tests count decisions. */
             "  timeout_ms: 2000\n"
             "envoy:\n  config: %s\n  ignore_dotfiles: true\n%s",
             group_redis.url, rules_dir, extra != NULL ? extra : "");
    test_daemon_must_start(d, yaml, NULL);
}

static void stop(test_daemon *d) {
    test_daemon_must_finish(d);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", rules_dir);
    assert_int_equal(system(cmd), 0);
}

static int post_json(int port, const char *body, http_response *r) {
    return http_request(port, "POST", "/json", "Content-Type: application/json\r\n", body, r);
}

static void test_json_and_healthcheck(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    test_daemon d;
    start(&d, "  response_headers: true\n");
    http_response r;
    const char *one =
        "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"u1\"}]}]}";
    assert_int_equal(post_json(d.port, one, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"overallCode\":\"OK\""));
    assert_non_null(strstr(r.body, "\"currentLimit\":{\"requestsPerUnit\":3,\"unit\":\"HOUR\"}"));
    assert_non_null(strstr(r.body, "\"limitRemaining\":2"));
    assert_non_null(strstr(r.body, "\"durationUntilReset\":\""));
    assert_non_null(strstr(r.body, "{\"key\":\"RateLimit-Limit\",\"value\":\"3\"}"));
    /* hitsAddend 2 takes the last two, then over: 429, remaining left out (0). */
    const char *two =
        "{\"domain\":\"api\",\"hitsAddend\":2,\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"u1\"}]}]}";
    assert_int_equal(post_json(d.port, two, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(post_json(d.port, one, &r), 0);
    assert_int_equal(r.status, 429);
    assert_non_null(strstr(r.body, "\"overallCode\":\"OVER_LIMIT\""));
    assert_non_null(strstr(r.body, "{\"code\":\"OVER_LIMIT\""));
    assert_null(strstr(r.body, "limitRemaining"));
    /* No rule: OK, no limit. */
    assert_int_equal(
        post_json(
            d.port,
            "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"x\",\"value\":\"y\"}]}]}",
            &r),
        0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"overallCode\":\"OK\",\"statuses\":[{\"code\":\"OK\"}]}\n");
    /* Not decisions: 400 with a message. */
    assert_int_equal(post_json(d.port, "{\"domain\":\"\",\"descriptors\":[{\"entries\":[]}]}", &r),
                     0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "domain must not be empty"));
    assert_int_equal(post_json(d.port, "{\"domain\":\"api\",\"descriptors\":[]}", &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "descriptor list must not be empty"));
    assert_int_equal(post_json(d.port, "{\"domain\":\"api\"", &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "malformed JSON"));
    assert_int_equal(post_json(d.port, "{\"domain\":\"api\",\"bogus\":1}", &r), 0);
    assert_int_equal(r.status, 400);
    assert_int_equal(http_request(d.port, "GET", "/json", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 405);
    /* Health. */
    assert_int_equal(http_request(d.port, "GET", "/healthcheck", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "OK");
    /* Per-rule series on /metrics. */
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(strstr(r.body, "porteirod_envoy_total_hits_total{rule=\"api.user\"} 4"));
    assert_non_null(strstr(r.body, "porteirod_envoy_over_limit_total{rule=\"api.user\"} 1"));
    assert_non_null(strstr(r.body, "porteirod_envoy_within_limit_total{rule=\"api.user\"} 3"));
    stop(&d);
}

/* A changed folder is picked up (inotify), a broken file is refused and the
 * old config serves; SIGHUP too. */
static void test_reload(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    test_daemon d;
    start(&d, NULL);
    http_response r;
    const char *req =
        "{\"domain\":\"web\",\"descriptors\":[{\"entries\":[{\"key\":\"ip\",\"value\":\"1.2.3.4\"}]}]}";
    assert_int_equal(post_json(d.port, req, &r), 0);
    assert_string_equal(r.body, "{\"overallCode\":\"OK\",\"statuses\":[{\"code\":\"OK\"}]}\n");
    write_file(rules_dir, "web.yaml",
               "domain: web\ndescriptors:\n  - key: ip\n    rate_limit:\n      unit: minute\n"
               "      requests_per_unit: 1\n");
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        test_sleep_ms(50);
        assert_int_equal(post_json(d.port, req, &r), 0);
        seen = strstr(r.body, "requestsPerUnit\":1") != NULL;
    }
    assert_true(seen);
    /* A broken file: refused, named with its line; web still limits. */
    write_file(
        rules_dir, "broken.yaml",
        "domain: broken\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n");
    int logged = 0;
    for (int i = 0; i < 100 && !logged; i++) {
        test_sleep_ms(50);
        logged = test_daemon_log_contains(
            &d, "broken.yaml:5: descriptors[0].rate_limit.unit: unknown unit 'fortnight'");
    }
    assert_true(logged);
    assert_true(test_daemon_log_contains(&d, "reload failed, keeping the running config"));
    assert_int_equal(post_json(d.port, req, &r), 0);
    assert_int_equal(r.status, 429);
    /* Fixed by hand, then SIGHUP (the watcher may have seen it already). */
    write_file(rules_dir, "broken.yaml", "domain: broken\n");
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    int back = 0;
    for (int i = 0; i < 800 && !back; i++) { /* up to 20 s (an ASan build) */
        test_sleep_ms(25);
        back = test_daemon_log_contains(&d, "envoy ratelimit's config");
    }
    assert_true(back);
    stop(&d);
}

/* --test-config: envoy ratelimit's files are checked; refused: exit 2. */
static void test_test_config(void **s) {
    (void)s;
    test_daemon d;
    start(&d, NULL);
    char out[2048];
    const char *argv[] = {getenv("PORTEIROD"), "--test-config", d.config, NULL};
    assert_int_equal(test_run(argv, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "1 domains"));
    write_file(rules_dir, "dup.yaml", "domain: api\n");
    assert_int_equal(test_run(argv, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "dup.yaml:1: domain: duplicate domain 'api'"));
    char path[400];
    snprintf(path, sizeof(path), "%s/dup.yaml", rules_dir);
    unlink(path);
    write_file(rules_dir, "bad.yaml",
               "domain: x\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n");
    assert_int_equal(test_run(argv, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "bad.yaml:5: descriptors[1]: duplicate descriptor 'x.a_b'"));
    stop(&d);
}

typedef struct counted {
    int allowed, denied, errors;
} counted;

/* 16 processes x 8 requests at one 50-per-hour limit: exactly 50 pass. */
static void test_sixteen_processes(void **s) {
    (void)s;
    enum { P = 16, N = 8, L = 50 };
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    test_daemon d;
    start(&d, NULL);
    write_file(rules_dir, "api.yaml",
               "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n"
               "      requests_per_unit: 50\n");
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    /* Until the new limit serves (another user: the shared one stays fresh). */
    const char *probe =
        "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"probe\"}]}]}";
    int reloaded = 0;
    /* Up to 20 s: an ASan build beside three other tests once took over 5. */
    for (int i = 0; i < 800 && !reloaded; i++) {
        http_response r;
        /* A slow answer (a loaded machine, a sanitizer build) is "not yet". */
        reloaded =
            post_json(d.port, probe, &r) == 0 && strstr(r.body, "\"requestsPerUnit\":50") != NULL;
        if (!reloaded)
            test_sleep_ms(25);
    }
    assert_true(reloaded);
    const char *req =
        "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"shared\"}]}]}";
    int fds[P][2];
    pid_t pids[P];
    for (int p = 0; p < P; p++) {
        assert_int_equal(pipe(fds[p]), 0);
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            counted c = {0};
            char raw[512];
            int len = snprintf(raw, sizeof(raw),
                               "POST /json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                               "Content-Length: %zu\r\n\r\n%s",
                               strlen(req), req);
            for (int i = 0; i < N; i++) {
                static http_response r;
                /* A generous wait: a loaded machine (or a sanitizer build)
                 * must not turn a late answer into an error. */
                if (http_raw(d.port, raw, (size_t)len, 30000, &r) != 0)
                    c.errors++;
                else if (r.status == 200)
                    c.allowed++;
                else if (r.status == 429)
                    c.denied++;
                else
                    c.errors++;
            }
            ssize_t w = write(fds[p][1], &c, sizeof(c));
            _exit(w == (ssize_t)sizeof(c) ? 0 : 1);
        }
        close(fds[p][1]);
    }
    counted total = {0};
    for (int p = 0; p < P; p++) {
        counted c;
        assert_int_equal(read(fds[p][0], &c, sizeof(c)), (ssize_t)sizeof(c));
        close(fds[p][0]);
        int status;
        waitpid(pids[p], &status, 0);
        total.allowed += c.allowed;
        total.denied += c.denied;
        total.errors += c.errors;
    }
    TU_EQ(total.errors, 0, "errors");
    TU_EQ(total.allowed, L, "allowed");
    TU_EQ(total.denied, P * N - L, "denied");
    stop(&d);
}

/* ---- --envoy-env ---- */

static const char *const *fake_env;

static const char *fake_get(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; fake_env[i] != NULL; i++)
        if (strncmp(fake_env[i], name, n) == 0 && fake_env[i][n] == '=')
            return fake_env[i] + n + 1;
    return NULL;
}

static char warned[1024];

static void fake_warn(const char *name, const char *why) {
    (void)why;
    snprintf(warned + strlen(warned), sizeof(warned) - strlen(warned), "%s;", name);
}

static char *env_yaml(const char *const *env, char *err, size_t errlen) {
    pd_envoy_env_log level;
    fake_env = env;
    warned[0] = '\0';
    return pd_envoy_env_yaml(fake_get, fake_warn, &level, err, errlen);
}

static void test_envoy_env(void **s) {
    (void)s;
    char err[512];
    const char *env[] = {"PORT=9090",
                         "GRPC_PORT=9091",
                         "REDIS_URL=127.0.0.1:6390",
                         "RUNTIME_ROOT=/srv/rt",
                         "RUNTIME_SUBDIRECTORY=ratelimit",
                         "NEAR_LIMIT_RATIO=0.9",
                         "LIMIT_RESPONSE_HEADERS_ENABLED=true",
                         "SHADOW_MODE=1",
                         "CACHE_KEY_PREFIX=rl_",
                         "LOCAL_CACHE_SIZE_IN_BYTES=1048576",
                         "USE_STATSD=true",
                         "STATSD_PORT=1",
                         "REDIS_AUTH=secret",
                         NULL};
    char *yaml = env_yaml(env, err, sizeof(err));
    assert_non_null(yaml);
    assert_non_null(strstr(yaml, "listen: \"0.0.0.0:9090\""));
    assert_non_null(strstr(yaml, "url: \"redis://:secret@127.0.0.1:6390\""));
    assert_non_null(strstr(yaml, "prefix: \"rl_\""));
    assert_non_null(strstr(yaml, "max_keys: 1024"));
    assert_non_null(strstr(yaml, "config: \"/srv/rt/ratelimit/config\""));
    assert_non_null(strstr(yaml, "grpc_listen: \"0.0.0.0:9091\""));
    assert_non_null(strstr(yaml, "response_headers: true"));
    assert_non_null(strstr(yaml, "shadow_mode: true"));
    assert_non_null(strstr(yaml, "near_limit_ratio: \"0.9\""));
    assert_string_equal(warned, "USE_STATSD;STATSD_PORT;");
    free(yaml);
    const char *cluster[] = {"REDIS_TYPE=cluster", "REDIS_URL=10.0.0.1:7000,10.0.0.2:7000", NULL};
    yaml = env_yaml(cluster, err, sizeof(err));
    assert_non_null(strstr(yaml, "redis+cluster://10.0.0.1:7000,10.0.0.2:7000"));
    assert_non_null(strstr(yaml, "deny_cache: off"));
    free(yaml);
    const char *sentinel[] = {"REDIS_TYPE=sentinel", "REDIS_URL=mymaster,10.0.0.1:26379", NULL};
    yaml = env_yaml(sentinel, err, sizeof(err));
    assert_non_null(strstr(yaml, "redis+sentinel://10.0.0.1:26379/mymaster"));
    free(yaml);
    const char *unix_socket[] = {"REDIS_SOCKET_TYPE=unix", "REDIS_URL=/run/redis.sock", NULL};
    yaml = env_yaml(unix_socket, err, sizeof(err));
    assert_non_null(strstr(yaml, "unix:///run/redis.sock"));
    free(yaml);
    /* TLS: rediss, and the files as redis.tls. */
    const char *tls[] = {"REDIS_TLS=true",
                         "REDIS_URL=r.internal:6380",
                         "REDIS_TLS_CACERT=/ca.pem",
                         "REDIS_TLS_CLIENT_CERT=/c.pem",
                         "REDIS_TLS_CLIENT_KEY=/c.key",
                         NULL};
    yaml = env_yaml(tls, err, sizeof(err));
    assert_non_null(strstr(yaml, "url: \"rediss://r.internal:6380\"\n  tls:\n    ca: \"/ca.pem\"\n"
                                 "    cert: \"/c.pem\"\n    key: \"/c.key\"\n"));
    free(yaml);
    const char *no_tls[] = {"REDIS_TLS_CACERT=/ca.pem", NULL};
    yaml = env_yaml(no_tls, err, sizeof(err));
    assert_null(strstr(yaml, "tls:"));
    assert_string_equal(warned, "REDIS_TLS_CACERT;");
    free(yaml);
    /* What cannot be kept is an error, named. */
    const char *memcache[] = {"BACKEND_TYPE=memcache", NULL};
    assert_null(env_yaml(memcache, err, sizeof(err)));
    assert_non_null(strstr(err, "BACKEND_TYPE"));
    const char *type[] = {"REDIS_TYPE=ring", NULL};
    assert_null(env_yaml(type, err, sizeof(err)));
    assert_non_null(strstr(err, "REDIS_TYPE=ring"));
    const char *level[] = {"LOG_LEVEL=loud", NULL};
    assert_null(env_yaml(level, err, sizeof(err)));
    const char *format[] = {"LOG_FORMAT=xml", NULL};
    assert_null(env_yaml(format, err, sizeof(err)));
    assert_non_null(strstr(err, "LOG_FORMAT=xml"));
    const char *boolean[] = {"SHADOW_MODE=maybe", NULL};
    assert_null(env_yaml(boolean, err, sizeof(err)));
    assert_non_null(strstr(err, "SHADOW_MODE=maybe"));
}

/* porteirod --envoy-env as a process: it serves /json from RUNTIME_ROOT's
 * files, and names the variable it does not support. */
static void test_envoy_env_process(void **s) {
    (void)s;
    char dir[] = "/tmp/porteiro-envenv-XXXXXX", sub[300], log[300], port[16], gport[16];
    char redis_url[64];
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/config", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file(sub, "api.yaml", API_RULES);
    snprintf(log, sizeof(log), "%s/log", dir);
    int p = test_free_port();
    snprintf(port, sizeof(port), "%d", p);
    snprintf(gport, sizeof(gport), "%d", test_free_port());
    snprintf(redis_url, sizeof(redis_url), "127.0.0.1:%d", group_redis.port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        setenv("HOST", "127.0.0.1", 1);
        setenv("PORT", port, 1);
        setenv("GRPC_PORT", gport, 1);
        setenv("RUNTIME_ROOT", dir, 1);
        setenv("RUNTIME_SUBDIRECTORY", "", 1);
        setenv("REDIS_URL", redis_url, 1);
        setenv("USE_STATSD", "false", 1);
        execl(getenv("PORTEIROD"), "porteirod", "--envoy-env", (char *)NULL);
        _exit(127);
    }
    http_response r;
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        test_sleep_ms(30);
        ok = http_request(p, "GET", "/healthcheck", NULL, NULL, &r) == 0 && r.status == 200;
    }
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "grep -q 'USE_STATSD is set but not supported' %s", log);
    int named = system(cmd) == 0;
    int posted = post_json(
        p,
        "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"env\"}]}]}",
        &r);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    assert_true(ok);
    assert_true(named);
    assert_int_equal(posted, 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"limitRemaining\":2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_and_healthcheck),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_test_config),
        cmocka_unit_test(test_sixteen_processes),
        cmocka_unit_test(test_envoy_env),
        cmocka_unit_test(test_envoy_env_process),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
