/* redis_server.c — start, stop, kill and freeze a private redis-server. */
#include "redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SERVERS 32

/* The pid of every running server, so exit and fatal signals can stop them
 * all. Pids, not test_redis pointers: a failed cmocka test unwinds the stack
 * that held its struct, and that memory is reused by the next test. */
static pid_t running[MAX_SERVERS];
static int hooks_installed;

static void forget(pid_t pid) {
    for (int i = 0; i < MAX_SERVERS; i++)
        if (running[i] == pid)
            running[i] = 0;
}

static void remember(pid_t pid) {
    for (int i = 0; i < MAX_SERVERS; i++)
        if (running[i] == 0) {
            running[i] = pid;
            return;
        }
}

static void kill_all(void) {
    for (int i = 0; i < MAX_SERVERS; i++)
        if (running[i] > 0) {
            kill(running[i], SIGCONT);
            kill(running[i], SIGKILL);
        }
}

static void on_fatal(int sig) {
    kill_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_hooks(void) {
    if (hooks_installed++)
        return;
    atexit(kill_all);
    int sigs[] = {SIGINT, SIGTERM, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], on_fatal);
    signal(SIGPIPE, SIG_IGN);
}

void test_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int64_t test_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int on_path(const char *name) {
    const char *path = getenv("PATH");
    if (path == NULL)
        return 0;
    char dir[4096];
    for (const char *p = path; *p != '\0';) {
        size_t n = strcspn(p, ":");
        if (n > 0 && n < sizeof(dir) - 256) {
            char file[4352];
            memcpy(dir, p, n);
            dir[n] = '\0';
            snprintf(file, sizeof(file), "%s/%s", dir, name);
            if (access(file, X_OK) == 0)
                return 1;
        }
        p += n;
        if (*p == ':')
            p++;
    }
    return 0;
}

int test_find_program(const char *name) {
    if (on_path(name))
        return 1;
    static const char *const sbins[] = {"/usr/sbin", "/sbin"};
    for (size_t i = 0; i < sizeof(sbins) / sizeof(sbins[0]); i++) {
        char file[300];
        snprintf(file, sizeof(file), "%s/%s", sbins[i], name);
        if (access(file, X_OK) != 0)
            continue;
        const char *path = getenv("PATH");
        char with[8192];
        snprintf(with, sizeof(with), "%s%s%s", path != NULL ? path : "", path != NULL ? ":" : "",
                 sbins[i]);
        setenv("PATH", with, 1);
        return 1;
    }
    return 0;
}

int test_free_port(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = -1;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int answers_ping(test_redis *r) {
    char out[64];
    test_redis_cmd(r, out, sizeof(out), "PING");
    /* NOAUTH: up, with --requirepass (the tests authenticate themselves). */
    return strcmp(out, "PONG") == 0 || strncmp(out, "NOAUTH", 6) == 0;
}

static int spawn(test_redis *r) {
    char port[16], *argv[96];
    int argc = 0;
    char extra[sizeof(r->extra)];

    snprintf(port, sizeof(port), "%d", r->port);
    argv[argc++] = "redis-server";
    if (r->conf[0] != '\0')
        argv[argc++] = r->conf;
    argv[argc++] = "--port";
    argv[argc++] = port;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--appendonly";
    argv[argc++] = "no";
    argv[argc++] = "--dir";
    argv[argc++] = r->dir;
    argv[argc++] = "--unixsocket";
    argv[argc++] = r->unix_path;
    argv[argc++] = "--unixsocketperm";
    argv[argc++] = "700";
    argv[argc++] = "--logfile";
    argv[argc++] = "redis.log";
    snprintf(extra, sizeof(extra), "%s", r->extra);
    for (char *tok = strtok(extra, " "); tok != NULL && argc < 94; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    /* Every data server of a test run gets these too (the Redis module,
     * for the *_module runs of the suite); sentinels do not. */
    char more[512];
    const char *env = getenv("PORTEIRO_TEST_REDIS_ARGS");
    snprintf(more, sizeof(more), "%s",
             env != NULL && strstr(r->extra, "--sentinel") == NULL ? env : "");
    for (char *tok = strtok(more, " "); tok != NULL && argc < 94; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;

    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* A sanitizer's runtime for the server alone (a module built with
         * ASan needs it loaded first): never the test's own. */
        const char *preload = getenv("PORTEIRO_REDIS_PRELOAD");
        if (preload != NULL && preload[0] != '\0')
            setenv("LD_PRELOAD", preload, 1);
        execvp("redis-server", argv);
        fprintf(stderr, "redis-server: %s\n", strerror(errno));
        _exit(127);
    }
    r->pid = pid;
    remember(pid);
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            r->pid = 0;
            forget(pid);
            return -1;
        }
        if (answers_ping(r))
            return 0;
        test_sleep_ms(10);
    }
    test_redis_kill9(r);
    return -1;
}

/* A fresh temporary folder for the server's socket, log and dump. */
static int make_dir(test_redis *r) {
    snprintf(r->dir, sizeof(r->dir), "/tmp/porteiro-redis-XXXXXX");
    if (mkdtemp(r->dir) == NULL) {
        fprintf(stderr, "test_redis: mkdtemp: %s\n", strerror(errno));
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->unix_path, sizeof(r->unix_path), "%s/redis.sock", r->dir);
    snprintf(r->unix_url, sizeof(r->unix_url), "unix://%s", r->unix_path);
    return 0;
}

int test_redis_start(test_redis *r, const char *extra_args) {
    memset(r, 0, sizeof(*r));
    install_hooks();
    snprintf(r->extra, sizeof(r->extra), "%s", extra_args ? extra_args : "");
    if (make_dir(r) != 0)
        return -1;
    for (int attempt = 0; attempt < 5; attempt++) { /* a raced port: try another */
        r->port = test_free_port();
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
        if (r->port > 0 && spawn(r) == 0)
            return 0;
    }
    fprintf(stderr, "test_redis_start: redis-server did not start (see %s/redis.log)\n", r->dir);
    return -1;
}

int test_redis_start_tls(test_redis *r, const char *server_cert, const char *server_key,
                         const char *ca_file, const char *tls_opts, const char *extra_args) {
    char extra[sizeof(r->extra)];
    for (int attempt = 0; attempt < 5; attempt++) { /* a raced TLS port: try another */
        int tls_port = test_free_port();
        snprintf(extra, sizeof(extra),
                 "--tls-port %d --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s "
                 "--tls-auth-clients no %s %s",
                 tls_port, server_cert, server_key, ca_file, tls_opts ? tls_opts : "",
                 extra_args ? extra_args : "");
        if (test_redis_start(r, extra) == 0) {
            r->tls_port = tls_port;
            snprintf(r->tls_url, sizeof(r->tls_url), "rediss://127.0.0.1:%d", tls_port);
            return 0;
        }
        test_redis_stop(r);
    }
    return -1;
}

int test_redis_start_port(test_redis *r, int port, const char *extra_args) {
    memset(r, 0, sizeof(*r));
    install_hooks();
    snprintf(r->extra, sizeof(r->extra), "%s", extra_args ? extra_args : "");
    if (make_dir(r) != 0)
        return -1;
    r->port = port;
    snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
    if (spawn(r) == 0)
        return 0;
    fprintf(stderr, "test_redis_start_port: redis-server did not start on %d\n", port);
    return -1;
}

static int sentinel_start(test_redis *r, int master_port, const char *name, const char *tls) {
    memset(r, 0, sizeof(*r));
    install_hooks();
    snprintf(r->extra, sizeof(r->extra), "--sentinel");
    if (make_dir(r) != 0)
        return -1;
    snprintf(r->conf, sizeof(r->conf), "%s/sentinel.conf", r->dir);
    FILE *f = fopen(r->conf, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "sentinel monitor %s 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 3000\n",
            name, master_port, name, name);
    if (tls != NULL) {
        r->tls_port = test_free_port();
        fprintf(f, "tls-port %d\n%s", r->tls_port, tls);
        snprintf(r->tls_url, sizeof(r->tls_url), "rediss://127.0.0.1:%d", r->tls_port);
    }
    fclose(f);
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = test_free_port();
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
        if (r->port > 0 && spawn(r) == 0)
            return 0;
    }
    return -1;
}

int test_sentinel_start(test_redis *r, int master_port, const char *name) {
    return sentinel_start(r, master_port, name, NULL);
}

int test_sentinel_start_tls(test_redis *r, int master_tls_port, const char *name,
                            const char *server_cert, const char *server_key, const char *ca_file) {
    char tls[900];
    snprintf(tls, sizeof(tls),
             "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-replication yes\n"
             "tls-auth-clients no\n",
             server_cert, server_key, ca_file);
    return sentinel_start(r, master_tls_port, name, tls);
}

long long test_sentinel_master_field(test_redis *sentinel, const char *name, const char *field) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", sentinel->port, tv);
    long long v = -1;
    redisReply *r = c != NULL && !c->err ? redisCommand(c, "SENTINEL MASTER %s", name) : NULL;
    for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->str != NULL && strcmp(r->element[i]->str, field) == 0)
            v = atoll(r->element[i + 1]->str);
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

int test_sentinels_start(test_sentinels *s, const char *name) {
    char extra[128], out[4096];
    memset(s, 0, sizeof(*s));
    if (test_redis_start(&s->master, "--repl-diskless-sync-delay 0") != 0)
        return -1;
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d --repl-diskless-sync-delay 0",
             s->master.port);
    if (test_redis_start(&s->replica, extra) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (test_sentinel_start(&s->sentinels[i], s->master.port, name) != 0)
            return -1;
    /* The replica synced, and the sentinels know it and each other. */
    for (int64_t end = test_mono_ms() + 15000; test_mono_ms() < end; test_sleep_ms(100)) {
        test_redis_cmd(&s->replica, out, sizeof(out), "INFO replication");
        if (strstr(out, "master_link_status:up") != NULL &&
            test_sentinel_master_field(&s->sentinels[0], name, "num-slaves") >= 1 &&
            test_sentinel_master_field(&s->sentinels[0], name, "num-other-sentinels") >= 2) {
            snprintf(s->url, sizeof(s->url),
                     "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
                     s->sentinels[0].port, s->sentinels[1].port, s->sentinels[2].port, name);
            return 0;
        }
    }
    fprintf(stderr, "sentinels: not ready\n");
    return -1;
}

void test_sentinels_stop(test_sentinels *s) {
    for (int i = 0; i < 3; i++)
        test_redis_stop(&s->sentinels[i]);
    test_redis_stop(&s->replica);
    test_redis_stop(&s->master);
}

static int port_free(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int test_free_low_port(void) {
    static unsigned seed;
    if (seed == 0)
        seed = (unsigned)getpid() ^ (unsigned)test_mono_ms();
    for (int i = 0; i < 1000; i++) {
        int port = 20000 + (int)(rand_r(&seed) % 35000u);
        if (port_free(port) && port_free(port + 10000))
            return port;
    }
    return -1;
}

static void reap(test_redis *r, int grace_ms) {
    for (int waited = 0; r->pid > 0; waited += 10) {
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid)
            break;
        if (waited >= grace_ms) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
            break;
        }
        test_sleep_ms(10);
    }
    forget(r->pid);
    r->pid = 0;
}

void test_redis_stop(test_redis *r) {
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGTERM);
        reap(r, 3000);
    }
    if (r->dir[0] != '\0') {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_redis_stop: could not remove %s\n", r->dir);
        r->dir[0] = '\0';
    }
}

void test_redis_kill9(test_redis *r) {
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        reap(r, 0);
    }
}

int test_redis_restart(test_redis *r) {
    if (r->pid > 0) { /* a graceful stop that keeps the folder (and its dump) */
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGTERM);
        reap(r, 3000);
    }
    if (r->dir[0] == '\0' && make_dir(r) != 0) /* test_redis_stop removed it */
        return -1;
    for (int i = 0; i < 100; i++) { /* the old socket may linger briefly */
        if (spawn(r) == 0)
            return 0;
        test_sleep_ms(20);
    }
    return -1;
}

void test_redis_freeze(test_redis *r) {
    if (r->pid > 0)
        kill(r->pid, SIGSTOP);
}

void test_redis_thaw(test_redis *r) {
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
}

int test_redis_cmd(test_redis *r, char *out, size_t outlen, const char *fmt, ...) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    int rc = -1;
    if (c == NULL || c->err) {
        if (out != NULL && outlen > 0)
            snprintf(out, outlen, "%s", c ? c->errstr : "out of memory");
        redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (reply != NULL) {
        rc = reply->type == REDIS_REPLY_ERROR ? -1 : 0;
        if (out != NULL && outlen > 0) {
            if (reply->type == REDIS_REPLY_INTEGER)
                snprintf(out, outlen, "%lld", reply->integer);
            else if (reply->str != NULL)
                snprintf(out, outlen, "%.*s", (int)reply->len, reply->str);
            else
                snprintf(out, outlen, "%s", reply->type == REDIS_REPLY_NIL ? "(nil)" : "");
        }
        freeReplyObject(reply);
    } else if (out != NULL && outlen > 0) {
        snprintf(out, outlen, "%s", c->errstr);
    }
    redisFree(c);
    return rc;
}

long long test_redis_decision_calls(test_redis *r) {
    char out[16384];
    long long n = 0;
    if (test_redis_cmd(r, out, sizeof(out), "INFO commandstats") != 0)
        return -1;
    for (const char *at = out; (at = strstr(at, "cmdstat_")) != NULL; at++) {
        const char *calls = strstr(at, ":calls=");
        if (calls != NULL &&
            (strncmp(at, "cmdstat_evalsha:", 16) == 0 || strncmp(at, "cmdstat_eval:", 13) == 0 ||
             strncmp(at, "cmdstat_porteiro.", 17) == 0))
            n += atoll(calls + 7);
    }
    return n;
}

test_redis group_redis;
const char *test_group_ca;

#ifdef PT_TEST_TLS
#include "tls_certs.h"
static test_certs group_certs;

/* The same tests over TLS: group_redis.url is the TLS port's (the plain
 * port stays for the tests' own inspection), verified against a test CA. */
int test_redis_group_setup(void **state) {
    (void)state;
    if (test_certs_make(&group_certs) != 0 ||
        test_redis_start_tls(&group_redis, group_certs.server_cert, group_certs.server_key,
                             group_certs.ca, NULL, NULL) != 0)
        return -1;
    snprintf(group_redis.url, sizeof(group_redis.url), "%s", group_redis.tls_url);
    test_group_ca = group_certs.ca;
    return 0;
}

int test_redis_group_teardown(void **state) {
    (void)state;
    test_redis_stop(&group_redis);
    test_certs_remove(&group_certs);
    test_group_ca = NULL;
    return 0;
}
#else
int test_redis_group_setup(void **state) {
    (void)state;
    return test_redis_start(&group_redis, NULL);
}

int test_redis_group_teardown(void **state) {
    (void)state;
    test_redis_stop(&group_redis);
    return 0;
}
#endif

/* ---- a Redis Cluster ---- */

int test_cluster_wait_ok(test_cluster *c, int timeout_ms) {
    int64_t end = test_mono_ms() + timeout_ms;
    while (test_mono_ms() < end) {
        int ok = 1;
        for (int i = 0; i < c->n && ok; i++) {
            char out[4096] = "";
            if (c->nodes[i].pid <= 0)
                continue;
            test_redis_cmd(&c->nodes[i], out, sizeof(out), "CLUSTER INFO");
            ok = strstr(out, "cluster_state:ok") != NULL;
        }
        if (ok)
            return 0;
        test_sleep_ms(50);
    }
    return -1;
}

/* The nodes' arguments: plain, or a TLS port beside the plain one with
 * tls-cluster (the bus speaks TLS; its port is set to the plain port +
 * 10000 so that redis-cli's CLUSTER MEET on the plain ports finds it). */
/* Extra arguments of every node of the cluster being started (a module:
 * test_cluster_start_args), "" otherwise. */
static const char *cluster_extra = "";

static int start_node(test_redis *n, int port, const char *tls) {
    char extra[1024], base[768];
    snprintf(base, sizeof(base),
             "--cluster-enabled yes --cluster-config-file nodes.conf "
             "--cluster-node-timeout 1000 --cluster-require-full-coverage no "
             "--repl-diskless-sync-delay 0 %s",
             cluster_extra);
    if (tls == NULL) {
        snprintf(extra, sizeof(extra), "%s", base);
        return test_redis_start_port(n, port, extra);
    }
    int tls_port = test_free_port();
    int w = snprintf(extra, sizeof(extra), "%s --cluster-port %d --tls-port %d %s", base,
                     port + 10000, tls_port, tls);
    if (w < 0 || (size_t)w >= sizeof(extra) || test_redis_start_port(n, port, extra) != 0)
        return -1;
    n->tls_port = tls_port;
    snprintf(n->tls_url, sizeof(n->tls_url), "rediss://127.0.0.1:%d", tls_port);
    return 0;
}

static int cluster_start(test_cluster *c, int masters, const char *tls) {
    char cmd[2048], *at = cmd;
    memset(c, 0, sizeof(*c));
    c->n = 2 * masters;
    if (c->n > TEST_CLUSTER_MAX)
        return -1;
    at += snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
    for (int i = 0; i < c->n; i++) {
        int started = -1;
        for (int attempt = 0; attempt < 5 && started != 0; attempt++) {
            int port = test_free_low_port();
            started = port > 0 ? start_node(&c->nodes[i], port, tls) : -1;
            if (started != 0)
                test_redis_stop(&c->nodes[i]);
        }
        if (started != 0) {
            test_cluster_stop(c);
            return -1;
        }
        at += snprintf(at, sizeof(cmd) - (size_t)(at - cmd), " 127.0.0.1:%d", c->nodes[i].port);
    }
    snprintf(at, sizeof(cmd) - (size_t)(at - cmd),
             " --cluster-replicas 1 --cluster-yes >%s/create.log 2>&1", c->nodes[0].dir);
    if (system(cmd) != 0 || test_cluster_wait_ok(c, 10000) != 0) {
        fprintf(stderr, "test_cluster_start: redis-cli --cluster create failed (%s/create.log)\n",
                c->nodes[0].dir);
        test_cluster_stop(c);
        return -1;
    }
    /* Replicas synced: a failover needs one with data. */
    for (int64_t end = test_mono_ms() + 10000; test_mono_ms() < end; test_sleep_ms(50)) {
        int synced = 0;
        for (int i = 0; i < c->n; i++) {
            char out[4096] = "";
            test_redis_cmd(&c->nodes[i], out, sizeof(out), "INFO replication");
            synced +=
                strstr(out, "role:master") != NULL || strstr(out, "master_link_status:up") != NULL;
        }
        if (synced == c->n)
            break;
    }
    snprintf(c->url, sizeof(c->url), "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", c->nodes[0].port,
             c->nodes[1].port);
    if (tls != NULL)
        snprintf(c->url, sizeof(c->url), "rediss+cluster://127.0.0.1:%d,127.0.0.1:%d",
                 c->nodes[0].tls_port, c->nodes[1].tls_port);
    return 0;
}

int test_cluster_start(test_cluster *c, int masters) {
    return cluster_start(c, masters, NULL);
}

int test_cluster_start_args(test_cluster *c, int masters, const char *extra_args) {
    cluster_extra = extra_args;
    int rc = cluster_start(c, masters, NULL);
    cluster_extra = "";
    return rc;
}

int test_cluster_start_tls(test_cluster *c, int masters, const char *server_cert,
                           const char *server_key, const char *ca_file) {
    char tls[900];
    snprintf(tls, sizeof(tls),
             "--tls-cluster yes --tls-replication yes --tls-cert-file %s --tls-key-file %s "
             "--tls-ca-cert-file %s --tls-auth-clients no",
             server_cert, server_key, ca_file);
    return cluster_start(c, masters, tls);
}

void test_cluster_stop(test_cluster *c) {
    for (int i = 0; i < c->n; i++)
        test_redis_stop(&c->nodes[i]);
}

/* True if a CLUSTER NODES line (master, "myself") lists slot s. */
static int line_has_slot(char *line, int s) {
    char *p = line;
    for (int f = 0; f < 8 && p != NULL; f++) /* the slots follow 8 fields */
        p = strchr(p + 1, ' ');
    while (p != NULL && *p == ' ' && p[1] != '[') {
        int lo = 0, hi = -1;
        if (sscanf(p + 1, "%d-%d", &lo, &hi) != 2 && sscanf(p + 1, "%d", &lo) == 1)
            hi = lo;
        if (s >= lo && s <= hi)
            return 1;
        p = strchr(p + 1, ' ');
    }
    return 0;
}

int test_cluster_owner(test_cluster *c, const char *key) {
    char slot[32] = "";
    for (int i = 0; i < c->n && slot[0] == '\0'; i++)
        if (c->nodes[i].pid > 0)
            test_redis_cmd(&c->nodes[i], slot, sizeof(slot), "CLUSTER KEYSLOT %s", key);
    for (int i = 0; i < c->n; i++) {
        char nodes[16384] = "";
        if (c->nodes[i].pid <= 0 ||
            test_redis_cmd(&c->nodes[i], nodes, sizeof(nodes), "CLUSTER NODES") != 0)
            continue;
        for (char *line = strtok(nodes, "\n"); line != NULL; line = strtok(NULL, "\n"))
            if (strstr(line, "myself") != NULL && strstr(line, "master") != NULL &&
                line_has_slot(line, atoi(slot)))
                return i;
    }
    return -1;
}

/* One node's CLUSTER MYID. */
static void node_id(test_redis *n, char *out, size_t len) {
    test_redis_cmd(n, out, len, "CLUSTER MYID");
}

int test_cluster_move_slot(test_cluster *c, const char *key, int dst, int pause_ms) {
    char slot[16] = "", src_id[64] = "", dst_id[64] = "", out[256];
    int src = test_cluster_owner(c, key);
    if (src < 0 || src == dst)
        return -1;
    test_redis_cmd(&c->nodes[src], slot, sizeof(slot), "CLUSTER KEYSLOT %s", key);
    node_id(&c->nodes[src], src_id, sizeof(src_id));
    node_id(&c->nodes[dst], dst_id, sizeof(dst_id));
    if (test_redis_cmd(&c->nodes[dst], out, sizeof(out), "CLUSTER SETSLOT %s IMPORTING %s", slot,
                       src_id) != 0 ||
        test_redis_cmd(&c->nodes[src], out, sizeof(out), "CLUSTER SETSLOT %s MIGRATING %s", slot,
                       dst_id) != 0) {
        fprintf(stderr, "test_cluster_move_slot: %s\n", out);
        return -1;
    }
    test_sleep_ms(pause_ms); /* traffic meets MIGRATING: ASK for keys not there */
    redisContext *ctx = redisConnect("127.0.0.1", c->nodes[src].port);
    /* tls-cluster: MIGRATE speaks TLS, to the destination's TLS port. */
    int to = c->nodes[dst].tls_port > 0 ? c->nodes[dst].tls_port : c->nodes[dst].port;
    /* A key at a time; bounded, so that a key MIGRATE keeps refusing (say
     * BUSYKEY: the destination holds it too) fails the move, never hangs. */
    int tries = 0;
    for (size_t n = 1; ctx != NULL && !ctx->err && n > 0 && tries < 1000; tries++) {
        redisReply *keys = redisCommand(ctx, "CLUSTER GETKEYSINSLOT %s 1", slot);
        n = keys != NULL && keys->type == REDIS_REPLY_ARRAY ? keys->elements : 0;
        if (n > 0) {
            redisReply *m =
                redisCommand(ctx, "MIGRATE 127.0.0.1 %d %s 0 5000", to, keys->element[0]->str);
            if (m != NULL && m->type == REDIS_REPLY_ERROR && tries % 100 == 0)
                fprintf(stderr, "test_cluster_move_slot: MIGRATE %s: %s\n", keys->element[0]->str,
                        m->str);
            if (m != NULL)
                freeReplyObject(m);
        }
        if (keys != NULL)
            freeReplyObject(keys);
        if (n > 0)
            test_sleep_ms(pause_ms / 3);
    }
    if (tries >= 1000) {
        redisFree(ctx);
        fprintf(stderr, "test_cluster_move_slot: slot %s never emptied\n", slot);
        return -1;
    }
    redisFree(ctx);
    /* The destination first, then the source, then the rest (Redis's own
     * order): the other way round, the source sends MOVED to a destination
     * that still answers MOVED back until it is told. */
    int order[TEST_CLUSTER_MAX], no = 0;
    order[no++] = dst;
    order[no++] = src;
    for (int i = 0; i < c->n; i++)
        if (i != dst && i != src && c->nodes[i].pid > 0)
            order[no++] = i;
    for (int k = 0; k < no; k++)
        test_redis_cmd(&c->nodes[order[k]], out, sizeof(out), "CLUSTER SETSLOT %s NODE %s", slot,
                       dst_id);
    return src;
}

void test_read_all(int fd, char *buf, size_t cap, size_t *len) {
    for (;;) {
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0 || *len + (size_t)n >= cap - 1) {
            *len += n > 0 ? (size_t)n : 0;
            break;
        }
        *len += (size_t)n;
    }
    buf[*len] = '\0';
}
