/* redis_server.h — tests start their own redis-server (test support only).
 *
 * Each server runs in a fresh temporary folder on a free loopback port, with
 * no persistence, and is stopped by pid. A process-exit hook and fatal-signal
 * handlers stop every server still running, so a failing test leaves none
 * behind. */
#ifndef TEST_REDIS_SERVER_H
#define TEST_REDIS_SERVER_H

#include <stdint.h>
#include <sys/types.h>

typedef struct test_redis {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[256];       /* temporary folder (socket, logs) */
    char url[320];       /* "redis://127.0.0.1:PORT" */
    char unix_path[300]; /* unix socket inside dir */
    char unix_url[320];  /* "unix://" + unix_path */
    char extra[1024];    /* extra redis-server arguments, kept for restart */
    char conf[300];      /* a config file given first ("" none): sentinels */
    int tls_port;        /* 0, or the TLS port (test_redis_start_tls) */
    char tls_url[320];   /* "rediss://127.0.0.1:TLS_PORT" */
} test_redis;

/* Small helpers every test uses: a sleep, and the monotonic clock in ms. */
void test_sleep_ms(int ms);
int64_t test_mono_ms(void);
/* Reads fd into buf (cap bytes, NUL-terminated, *len bytes so far) until it
 * closes, fails (EIO on a pty whose other side is gone) or buf is full. */
void test_read_all(int fd, char *buf, size_t cap, size_t *len);
/* Whether the program name is on PATH, or in /usr/sbin or /sbin (Debian
 * installs nginx in /usr/sbin, which a user's PATH may lack): then that
 * folder is added to PATH, for execlp and system. */
int test_find_program(const char *name);

/* A port the kernel just handed out on loopback: free unless raced. */
int test_free_port(void);

/* Starts redis-server with optional extra arguments (e.g. "--requirepass x"),
 * waits until it answers PING. PORTEIRO_REDIS_PRELOAD in the environment
 * becomes the server's LD_PRELOAD (a sanitizer runtime for a module). Returns 0, or -1 (with a
 * message on stderr). */
int test_redis_start(test_redis *r, const char *extra_args);
/* SIGTERM, wait, SIGKILL if needed; removes the folder. Safe to call twice. */
void test_redis_stop(test_redis *r);
/* kill -9 now (folder kept, so test_redis_restart can reuse port and args). */
void test_redis_kill9(test_redis *r);
/* Starts again on the same port with the same arguments (after kill9/stop). */
int test_redis_restart(test_redis *r);
/* SIGSTOP / SIGCONT: a frozen server that accepts nothing and answers nothing. */
void test_redis_freeze(test_redis *r);
void test_redis_thaw(test_redis *r);
/* Runs one command through redis-cli-less hiredis, e.g. "SCRIPT FLUSH";
 * returns 0 if Redis answered without an error. The reply text (status,
 * string, integer as text, or error) is copied to out when out is not NULL. */
int test_redis_cmd(test_redis *r, char *out, size_t outlen, const char *fmt, ...);

/* The calls that decided, from INFO commandstats: EVALSHA and EVAL, and
 * the Redis module's porteiro.* commands when the server has it loaded.
 * -1 if INFO fails. */
long long test_redis_decision_calls(test_redis *r);

/* A server with a TLS port too (tls_port, tls_url; the plain port stays for
 * the tests' own commands), serving the certificate server_cert/server_key
 * and trusting client certificates signed by ca_file; tls_opts (NULL: none)
 * come first, e.g. "--tls-auth-clients yes" (the default here is no). */
int test_redis_start_tls(test_redis *r, const char *server_cert, const char *server_key,
                         const char *ca_file, const char *tls_opts, const char *extra_args);
/* The least a porteiro ACL user needs (docs/faults.md, "Least privilege"):
 * ACL SETUSER NAME on >PASSWORD resetkeys ~KEYS resetchannels
 * TEST_LEAST_PRIVILEGE. A test of it must fail if one of these is dropped. */
#define TEST_LEAST_PRIVILEGE                                                                       \
    "-@all +evalsha +eval +script|load +time +get +set +del +pexpire +zadd +zcard +zcount "        \
    "+zrange +zrem +zremrangebyrank +zremrangebyscore +zscore +ping +info"

/* test_redis_start on a given port (no retry on another one). */
int test_redis_start_port(test_redis *r, int port, const char *extra_args);

/* A free loopback port below 55536 whose port + 10000 (a cluster node's bus)
 * is free too. */
int test_free_low_port(void);

/* A Redis Cluster of `masters` masters with one replica each, made with
 * redis-cli --cluster create (cluster-node-timeout 1000 ms), in temporary
 * folders. url: "redis+cluster://127.0.0.1:P1,127.0.0.1:P2". */
#define TEST_CLUSTER_MAX 8
typedef struct test_cluster {
    test_redis nodes[TEST_CLUSTER_MAX];
    int n;
    char url[512];
} test_cluster;
int test_cluster_start(test_cluster *c, int masters);
/* The same with extra redis-server arguments on every node (a module). */
int test_cluster_start_args(test_cluster *c, int masters, const char *extra_args);
/* The same with tls-cluster and tls-replication: each node also has a TLS
 * port (tls_port, tls_url), the bus and the replication speak TLS, and
 * url is "rediss+cluster://" two nodes' TLS ports. */
int test_cluster_start_tls(test_cluster *c, int masters, const char *server_cert,
                           const char *server_key, const char *ca_file);
void test_cluster_stop(test_cluster *c);
/* Waits (up to timeout_ms) until every live node says cluster_state:ok. */
int test_cluster_wait_ok(test_cluster *c, int timeout_ms);
/* The node (index in c->nodes) that is master of key's slot now, or -1. */
int test_cluster_owner(test_cluster *c, const char *key);
/* Moves the slot of key from its master to node dst as a reshard does,
 * traffic free to run meanwhile: IMPORTING / MIGRATING, pause_ms, the
 * slot's keys MIGRATEd one at a time pause_ms / 3 apart (to dst's TLS port
 * on a tls-cluster), then SETSLOT NODE on dst, the source, the rest.
 * Returns the source's index, or -1. */
int test_cluster_move_slot(test_cluster *c, const char *key, int dst, int pause_ms);

/* A Redis Sentinel (redis-server --sentinel) watching the master at
 * 127.0.0.1:master_port under `name` (quorum 2, down after 1000 ms,
 * failover timeout 3000 ms). */
int test_sentinel_start(test_redis *r, int master_port, const char *name);
/* The same over TLS: a TLS port too (tls_port), and the sentinel speaks TLS
 * to the master (at its TLS port), the replicas and the other sentinels
 * (tls-replication). */
int test_sentinel_start_tls(test_redis *r, int master_tls_port, const char *name,
                            const char *server_cert, const char *server_key, const char *ca_file);

/* One master, one replica and three sentinels watching it under `name`
 * (test_sentinel.c, test_quota_sentinel.c: once per test program). Returns
 * 0 once the replica has synced and the sentinels know it and each other
 * (up to 15 s), -1 otherwise. url: "redis+sentinel://S1,S2,S3/name". */
typedef struct test_sentinels {
    test_redis master, replica, sentinels[3];
    char url[512];
} test_sentinels;
int test_sentinels_start(test_sentinels *s, const char *name);
/* Stops the five servers (safe to call twice). */
void test_sentinels_stop(test_sentinels *s);
/* A field of SENTINEL MASTER name's [field, value, ...] reply, asked of
 * sentinel, as a number; -1 when absent. */
long long test_sentinel_master_field(test_redis *sentinel, const char *name, const char *field);

/* One redis-server shared by every test of a cmocka group: pass these two
 * as the group's setup and teardown; the tests use group_redis. */
extern test_redis group_redis;
/* Built with PT_TEST_TLS (the *_tls twins of some tests): group_redis.url
 * is a rediss:// URL and this the CA file to verify it with; else NULL. */
extern const char *test_group_ca;
int test_redis_group_setup(void **state);
int test_redis_group_teardown(void **state);

#endif
