/* test_tls.c — TLS to Redis on the blocking path, against real TLS
 * redis-servers and certificates made by openssl for the run: verified
 * checks, mTLS allowed and refused, each failure with its message and the
 * CLI's exit code, files that cannot be used, on_error and the breaker on a
 * TLS failure, a restarted Redis, certificate rotation by reload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "porteiro_libevent.h"
#include "redis/url.h"
#include "test_util.h"
#include "tls_certs.h"

static test_certs certs;
static test_redis srv;       /* TLS (and a plain port), no client certificate asked */
static test_redis srv_mtls;  /* TLS, client certificates required */
static test_redis srv_other; /* TLS with the certificate for "redis.test" only */

static const test_tls_servers servers = {&srv, &srv_mtls, &srv_other};

static int setup(void **state) {
    (void)state;
    return test_tls_servers_start(&certs, &servers);
}

static int teardown(void **state) {
    (void)state;
    test_tls_servers_stop(&certs, &servers);
    return 0;
}

/* Options for url with the test CA; the caller adjusts. */
static porteiro_options opts_for(const char *url) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.tls_ca_file = certs.ca;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.breaker_failures = -1;
    o.connect_timeout_ms = 3000;
    o.command_timeout_ms = 3000;
    return o;
}

static porteiro_t *open_ok(const porteiro_options *o) {
    char err[256] = "";
    porteiro_status st = PORTEIRO_OK;
    porteiro_t *p = porteiro_new(o, &st, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new(%s): %d %s", o->redis_url, (int)st, err);
    return p;
}

static const porteiro_limit gcra = {PORTEIRO_GCRA, 10, 1000, 0};

/* One check; its status, and the handle's message in msg. */
static porteiro_status check_once(porteiro_t *p, const char *key, porteiro_decision *d, char *msg,
                                  size_t len) {
    porteiro_status st = porteiro_check(p, &gcra, key, 1, d);
    snprintf(msg, len, "%s", porteiro_errmsg(p));
    return st;
}

/* A handle made from o whose first check fails with want, its message
 * naming `mention`. */
static void expect_failure(const porteiro_options *o, porteiro_status want, const char *mention) {
    porteiro_t *p = open_ok(o);
    porteiro_decision d;
    char msg[256];
    porteiro_status st = check_once(p, "fails", &d, msg, sizeof(msg));
    if (st != want || strstr(msg, mention) == NULL)
        fail_msg("%s: status %d, message [%s], wanted %d and [%s]", o->redis_url, (int)st, msg,
                 (int)want, mention);
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    assert_true(s.tls_failures >= 1 || want == PORTEIRO_ERR_TIMEOUT ||
                strstr(mention, "rediss://") != NULL);
    porteiro_free(p);
}

/* porteiro_new refuses o with PORTEIRO_ERR_INVALID, naming `mention`. */
static void expect_invalid(const porteiro_options *o, const char *mention) {
    char err[256] = "";
    porteiro_status st = PORTEIRO_OK;
    porteiro_t *p = porteiro_new(o, &st, err, sizeof(err));
    if (p != NULL || st != PORTEIRO_ERR_INVALID || strstr(err, mention) == NULL)
        fail_msg("status %d, message [%s], wanted INVALID and [%s]", (int)st, err, mention);
}

static void url_forms(void **state) {
    (void)state;
    pt_redis_url u;
    char err[128];
    assert_int_equal(pt_redis_url_parse("rediss://cache.example", &u, err, sizeof(err)), 0);
    assert_true(u.tls);
    assert_int_equal(u.port, 6379);
    assert_string_equal(u.host, "cache.example");
    assert_int_equal(
        pt_redis_url_parse("rediss://bob:s3cret@10.0.0.1:6380/2", &u, err, sizeof(err)), 0);
    assert_true(u.tls && u.port == 6380 && u.db == 2);
    assert_string_equal(u.user, "bob");
    assert_string_equal(u.password, "s3cret");
    assert_int_equal(pt_redis_url_parse("rediss+cluster://a:7000,b:7001", &u, err, sizeof(err)), 0);
    assert_true(u.tls && u.kind == PT_URL_CLUSTER && u.nnodes == 2);
    assert_int_equal(u.nodes[1].port, 7001);
    assert_int_equal(
        pt_redis_url_parse("rediss+sentinel://s1:26379/mymaster/3", &u, err, sizeof(err)), 0);
    assert_true(u.tls && u.kind == PT_URL_SENTINEL && u.db == 3);
    assert_string_equal(u.master, "mymaster");
    assert_int_equal(pt_redis_url_parse("redis://h", &u, err, sizeof(err)), 0);
    assert_false(u.tls);
    assert_int_equal(pt_redis_url_parse("redisss://h", &u, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rediss://"));
    assert_int_equal(pt_redis_url_parse("rediss+cluster:/h", &u, err, sizeof(err)), -1);
}

static void verified_checks(void **state) {
    (void)state;
    /* By IP (the certificate's IP address) and by name (its DNS name). */
    char by_name[64];
    snprintf(by_name, sizeof(by_name), "rediss://localhost:%d", srv.tls_port);
    const char *urls[] = {srv.tls_url, by_name};
    for (size_t i = 0; i < 2; i++) {
        porteiro_options o = opts_for(urls[i]);
        porteiro_t *p = open_ok(&o);
        porteiro_decision d;
        char msg[256];
        for (int k = 0; k < 12; k++) {
            assert_int_equal(check_once(p, i ? "ok-name" : "ok-ip", &d, msg, sizeof(msg)),
                             PORTEIRO_OK);
            assert_int_equal(d.allowed, k < 10);
        }
        porteiro_stats s;
        porteiro_stats_get(p, &s);
        assert_int_equal(s.tls_handshakes, 1);
        assert_int_equal(s.tls_failures, 0);
        porteiro_free(p);
    }
    /* The keys are in this Redis: the TLS port is the same server. */
    char out[32];
    test_redis_cmd(&srv, out, sizeof(out), "EXISTS porteiro:{ok-ip}:gc:1000");
    assert_string_equal(out, "1");
    /* redis:// with tls on is TLS as well. */
    char plain_scheme[64];
    snprintf(plain_scheme, sizeof(plain_scheme), "redis://127.0.0.1:%d", srv.tls_port);
    porteiro_options o = opts_for(plain_scheme);
    o.tls = true;
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    assert_int_equal(check_once(p, "ok-flag", &d, msg, sizeof(msg)), PORTEIRO_OK);
    porteiro_free(p);
}

static void verification_is_on_by_default(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.tls_ca_file = NULL; /* the system store does not know the test CA */
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "certificate verify failed");
    o.tls_ca_file = certs.other_ca;
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "certificate verify failed");
    o.tls_ca_file = NULL;
    o.tls_ca_dir = certs.dir; /* not hashed: no CA found there either */
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "certificate verify failed");
    /* insecure: no verification, the check goes through. */
    o.tls_ca_dir = NULL;
    o.tls_ca_file = certs.other_ca;
    o.tls_insecure = true;
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    assert_int_equal(check_once(p, "insecure", &d, msg, sizeof(msg)), PORTEIRO_OK);
    porteiro_free(p);
}

static void host_name_checked(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv_other.tls_url);
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "host name mismatch");
    o.tls_server_name = "redis.test"; /* the name the certificate is for */
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    assert_int_equal(check_once(p, "sni", &d, msg, sizeof(msg)), PORTEIRO_OK);
    porteiro_free(p);
    o.tls_server_name = "other.test";
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "host name mismatch");
}

static void mtls(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv_mtls.tls_url);
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "wants a client certificate");
    /* A certificate from a CA the server does not trust. */
    o.tls_cert_file = certs.other_server_cert;
    o.tls_key_file = certs.other_server_key;
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "client certificate");
    o.tls_cert_file = certs.client_cert;
    o.tls_key_file = certs.client_key;
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    assert_int_equal(check_once(p, "mtls", &d, msg, sizeof(msg)), PORTEIRO_OK);
    assert_true(d.allowed);
    porteiro_free(p);
}

static void wrong_port_kind(void **state) {
    (void)state;
    /* rediss:// to the plain port: no TLS answer, within the budget. */
    char url[64];
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", srv.port);
    porteiro_options o = opts_for(url);
    o.connect_timeout_ms = o.command_timeout_ms = 300;
    int64_t t0 = test_mono_ms();
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    porteiro_status st = check_once(p, "plain", &d, msg, sizeof(msg));
    int64_t took = test_mono_ms() - t0;
    if ((st != PORTEIRO_ERR_TIMEOUT && st != PORTEIRO_ERR_CONNECT) || strstr(msg, "TLS") == NULL)
        fail_msg("status %d, message [%s]", (int)st, msg);
    assert_true(took < 2 * 300 + 500); /* porteiro_new's try and the check's */
    porteiro_free(p);
    /* redis:// to the TLS port. */
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", srv.tls_port);
    o = opts_for(url);
    o.tls_ca_file = NULL;
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "rediss://");
}

static void unusable_files(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.tls_ca_file = "/nonexistent/ca.pem";
    expect_invalid(&o, "/nonexistent/ca.pem: No such file or directory");
    o = opts_for(srv.tls_url);
    o.tls_cert_file = certs.client_cert;
    o.tls_key_file = certs.stray_key;
    expect_invalid(&o, "does not match the certificate");
    o.tls_key_file = "/nonexistent/key.pem";
    expect_invalid(&o, "key /nonexistent/key.pem: No such file");
    o.tls_key_file = certs.ca; /* a certificate, not a key */
    expect_invalid(&o, "tls: key");
    o.tls_key_file = NULL;
    expect_invalid(&o, "needs its key");
    o = opts_for(srv.tls_url);
    o.tls_cert_file = certs.client_key; /* a key, not a certificate */
    o.tls_key_file = certs.client_key;
    expect_invalid(&o, "client certificate");
    /* TLS options with TLS off, over a unix socket, without Redis. */
    o = opts_for(srv.url);
    expect_invalid(&o, "TLS off");
    o = opts_for(srv.unix_url);
    o.tls = true;
    expect_invalid(&o, "unix socket");
    o = opts_for(NULL);
    expect_invalid(&o, "need a Redis URL");
}

static void failure_feeds_on_error_and_breaker(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.tls_ca_file = certs.other_ca;
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.breaker_failures = 2;
    o.breaker_cooldown_ms = 10000;
    porteiro_t *p = open_ok(&o); /* its first connect failed: one failure */
    porteiro_decision d;
    char msg[256];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(check_once(p, "open", &d, msg, sizeof(msg)), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    }
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    assert_int_equal(s.breaker_opened, 1);
    assert_true(s.breaker_skips >= 1);
    assert_true(s.tls_failures >= 2 && s.tls_handshakes == 0);
    porteiro_free(p);
}

static void redis_restarted(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256];
    assert_int_equal(check_once(p, "restart", &d, msg, sizeof(msg)), PORTEIRO_OK);
    assert_int_equal(test_redis_restart(&srv), 0);
    porteiro_status st = PORTEIRO_ERR_CONNECT;
    for (int i = 0; i < 20 && st != PORTEIRO_OK; i++)
        st = check_once(p, "restart", &d, msg, sizeof(msg));
    assert_int_equal(st, PORTEIRO_OK);
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    assert_int_equal(s.tls_handshakes, 2);
    porteiro_free(p);
}

/* Copies file from to to (0 on success). */
static int copy_file(const char *from, const char *to) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    return system(cmd) == 0 ? 0 : -1;
}

static void reload_reads_new_files(void **state) {
    (void)state;
    char ca[256];
    test_certs_path(&certs, "rotating-ca.crt", ca, sizeof(ca));
    assert_int_equal(copy_file(certs.other_ca, ca), 0);
    porteiro_options o = opts_for(srv.tls_url);
    o.tls_ca_file = ca;
    porteiro_t *p = open_ok(&o);
    porteiro_decision d;
    char msg[256], err[256];
    assert_int_equal(check_once(p, "rotate", &d, msg, sizeof(msg)), PORTEIRO_ERR_CONNECT);
    assert_int_equal(copy_file(certs.ca, ca), 0);
    /* The file changed, but the handle reads it only when told to. */
    assert_int_equal(check_once(p, "rotate", &d, msg, sizeof(msg)), PORTEIRO_ERR_CONNECT);
    assert_int_equal(porteiro_tls_reload(p, err, sizeof(err)), PORTEIRO_OK);
    assert_int_equal(check_once(p, "rotate", &d, msg, sizeof(msg)), PORTEIRO_OK);
    /* A reload that cannot read the files keeps what it had. */
    assert_int_equal(remove(ca), 0);
    assert_int_equal(porteiro_tls_reload(p, err, sizeof(err)), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "rotating-ca.crt"));
    test_redis_cmd(&srv, NULL, 0, "CLIENT KILL TYPE normal");
    porteiro_status st = PORTEIRO_ERR_CONNECT;
    for (int i = 0; i < 3 && st != PORTEIRO_OK; i++)
        st = check_once(p, "rotate", &d, msg, sizeof(msg));
    assert_int_equal(st, PORTEIRO_OK);
    porteiro_free(p);
    /* Without TLS a reload has nothing to do. */
    p = tu_open(srv.url, "plain", 0);
    assert_int_equal(porteiro_tls_reload(p, err, sizeof(err)), PORTEIRO_OK);
    porteiro_free(p);
}

/* The same handle on the event loop: the loop connection speaks TLS too
 * (alink.c; its own tests: test_async_tls). */
static void on_async(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    int *out = arg;
    *out = st == PORTEIRO_OK && d->fallback == PORTEIRO_FALLBACK_NONE ? 1 : -1;
}

static void event_loop_speaks_tls(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    porteiro_t *p = open_ok(&o);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    int answered = 0;
    porteiro_request req = {.limits = &gcra,
                            .nlimits = 1,
                            .key = "loop",
                            .key_len = 4,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    assert_int_equal(porteiro_check_async(p, &req, on_async, &answered), PORTEIRO_OK);
    for (int64_t t0 = test_mono_ms(); answered == 0 && test_mono_ms() - t0 < 5000;)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_int_equal(answered, 1);
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    assert_true(s.tls_handshakes >= 2); /* the blocking connection's, the loop's */
    porteiro_free(p);
    event_base_free(base);
}

/* ---- the CLI ---- */

typedef struct cli_run {
    int code;
    char out[4096], err[4096];
} cli_run;

static void slurp(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f != NULL)
        fclose(f);
}

/* Runs `porteiro ARGS` through the shell (ARGS are simple words here). */
static void cli(cli_run *r, const char *fmt, ...) {
    char args[1536], cmd[2400], out[200], err[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    test_certs_path(&certs, "cli.out", out, sizeof(out));
    test_certs_path(&certs, "cli.err", err, sizeof(err));
    snprintf(cmd, sizeof(cmd), "%s %s >%s 2>%s", getenv("PORTEIRO_CLI"), args, out, err);
    int status = system(cmd);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    slurp(out, r->out, sizeof(r->out));
    slurp(err, r->err, sizeof(r->err));
}

static void cli_expect(const cli_run *r, int code, const char *mention) {
    const char *where = code <= 1 ? r->out : r->err;
    if (r->code != code || strstr(where, mention) == NULL)
        fail_msg("exit %d, stdout [%s], stderr [%s]; wanted %d and [%s]", r->code, r->out, r->err,
                 code, mention);
}

#define GCRA "check --algorithm gcra --limit 5 --period 1m"

static void cli_exit_codes(void **state) {
    (void)state;
    if (getenv("PORTEIRO_CLI") == NULL)
        skip();
    cli_run r;
    cli(&r, GCRA " --redis %s --cacert %s k1", srv.tls_url, certs.ca);
    cli_expect(&r, 0, "\"allowed\":true");
    cli(&r, GCRA " --redis redis://127.0.0.1:%d --tls --cacert %s k1", srv.tls_port, certs.ca);
    cli_expect(&r, 0, "\"remaining\":3");
    cli(&r, GCRA " --redis %s --cacert %s k1", srv.tls_url, certs.other_ca);
    cli_expect(&r, 3, "certificate verify failed");
    cli(&r, GCRA " --redis %s --cacert %s k1", srv_other.tls_url, certs.ca);
    cli_expect(&r, 3, "host name mismatch");
    cli(&r, GCRA " --redis %s --cacert %s --sni redis.test k1", srv_other.tls_url, certs.ca);
    cli_expect(&r, 0, "\"allowed\":true");
    cli(&r, GCRA " --redis %s --cacert %s k1", srv_mtls.tls_url, certs.ca);
    cli_expect(&r, 3, "wants a client certificate");
    cli(&r, GCRA " --redis %s --cacert %s --cert %s --key %s k1", srv_mtls.tls_url, certs.ca,
        certs.client_cert, certs.client_key);
    cli_expect(&r, 0, "\"allowed\":true");
    cli(&r, GCRA " --redis rediss://127.0.0.1:%d --cacert %s --timeout-ms 300 k1", srv.port,
        certs.ca);
    cli_expect(&r, 3, "TLS");
    cli(&r, GCRA " --redis redis://127.0.0.1:%d k1", srv.tls_port);
    cli_expect(&r, 3, "rediss://");
    cli(&r, GCRA " --redis %s --cacert %s --cert %s --key %s k1", srv.tls_url, certs.ca,
        certs.client_cert, certs.stray_key);
    cli_expect(&r, 2, "does not match the certificate");
    cli(&r, GCRA " --redis %s --cacert %s --cert %s --key /nonexistent/k.pem k1", srv.tls_url,
        certs.ca, certs.client_cert);
    cli_expect(&r, 2, "/nonexistent/k.pem: No such file");
    cli(&r, GCRA " --redis %s --insecure k1", srv.tls_url);
    cli_expect(&r, 0, "\"allowed\":true");
    if (strstr(r.err, "warning") == NULL || strstr(r.err, "--insecure") == NULL)
        fail_msg("no warning for --insecure: [%s]", r.err);
    cli(&r, GCRA " --redis %s --tls=yes k1", srv.tls_url);
    cli_expect(&r, 2, "--tls takes no value");
    /* Every command that takes --redis takes the TLS flags. */
    const char *cmds[] = {"reset --algorithm gcra --limit 5 --period 1m k1", "memory",
                          "acquire --limit 2 --lease 1s job",
                          "bench --requests 200 --connections 2 --keys 10"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cli(&r, "%s --redis %s --cacert %s", cmds[i], srv.tls_url, certs.ca);
        if (r.code != 0)
            fail_msg("%s: exit %d [%s]", cmds[i], r.code, r.err);
        cli(&r, "%s --redis %s --cacert %s", cmds[i], srv.tls_url, certs.other_ca);
        cli_expect(&r, 3, "certificate verify failed");
    }
    cli(&r, "check --help");
    cli_expect(&r, 0, "--cacertdir DIR");
}

/* Writes a config file in the certs folder; returns its path. */
static const char *write_config(const char *name, const char *fmt, ...) {
    static char path[256];
    test_certs_path(&certs, name, path, sizeof(path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    return path;
}

static void config_file_tls(void **state) {
    (void)state;
    if (getenv("PORTEIRO_CLI") == NULL)
        skip();
    cli_run r;
    const char *ok = write_config("mtls.yaml",
                                  "redis:\n  url: %s\n  timeout_ms: 1000\n  tls:\n"
                                  "    ca: %s\n    cert: %s\n    key: %s\n"
                                  "policies:\n  api:\n    limits: [fixed_window 2/1m]\n",
                                  srv_mtls.tls_url, certs.ca, certs.client_cert, certs.client_key);
    cli(&r, "check --config %s --policy api cfg", ok);
    cli_expect(&r, 0, "\"remaining\":1");
    /* A tls: section turns TLS on with a redis:// URL; server_name is the SNI. */
    const char *named = write_config("named.yaml",
                                     "redis:\n  url: redis://127.0.0.1:%d\n  tls:\n"
                                     "    ca: %s\n    server_name: redis.test\n"
                                     "policies:\n  api:\n    limits: [fixed_window 2/1m]\n",
                                     srv_other.tls_port, certs.ca);
    cli(&r, "check --config %s --policy api cfg", named);
    cli_expect(&r, 0, "\"remaining\":1");
    /* Flags win over the file: the wrong CA. */
    cli(&r, "check --config %s --policy api --on-error error --cacert %s cfg", named,
        certs.other_ca);
    cli_expect(&r, 3, "certificate verify failed");
    const char *nokey = write_config("nokey.yaml",
                                     "redis:\n  url: %s\n  tls:\n    ca: %s\n    cert: %s\n"
                                     "policies:\n  api:\n    limits: [fixed_window 2/1m]\n",
                                     srv.tls_url, certs.ca, certs.client_cert);
    cli(&r, "check --config %s --policy api cfg", nokey);
    cli_expect(&r, 2, "needs its key");
    const char *insecure = write_config("insecure.yaml",
                                        "redis:\n  url: %s\n  tls:\n    insecure: true\n"
                                        "policies:\n  api:\n    limits: [fixed_window 2/1m]\n",
                                        srv.tls_url);
    cli(&r, "check --config %s --policy api cfg", insecure);
    cli_expect(&r, 0, "\"allowed\":true");
    assert_non_null(strstr(r.err, "warning"));
    const char *bad =
        write_config("bad.yaml", "redis:\n  url: %s\n  tls:\n    insecure: maybe\n", srv.tls_url);
    cli(&r, "check --config %s --policy api cfg", bad);
    cli_expect(&r, 2, "redis.tls.insecure");
    bad = write_config("bad2.yaml", "redis:\n  url: %s\n  tls:\n    cafile: x\n", srv.tls_url);
    cli(&r, "check --config %s --policy api cfg", bad);
    cli_expect(&r, 2, "redis.tls.cafile: unknown field");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(url_forms),
        cmocka_unit_test(verified_checks),
        cmocka_unit_test(verification_is_on_by_default),
        cmocka_unit_test(host_name_checked),
        cmocka_unit_test(mtls),
        cmocka_unit_test(wrong_port_kind),
        cmocka_unit_test(unusable_files),
        cmocka_unit_test(failure_feeds_on_error_and_breaker),
        cmocka_unit_test(redis_restarted),
        cmocka_unit_test(reload_reads_new_files),
        cmocka_unit_test(event_loop_speaks_tls),
        cmocka_unit_test(cli_exit_codes),
        cmocka_unit_test(config_file_tls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
