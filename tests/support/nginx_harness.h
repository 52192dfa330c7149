/* nginx_harness.h — test support for ngx_http_porteiro_module: Debian's
 * nginx started on a free port with the module and a configuration of the
 * test's own (its folder under /tmp), stopped and checked for crashed
 * workers; clients in threads. Include after <cmocka.h>. */
#ifndef TEST_NGINX_HARNESS_H
#define TEST_NGINX_HARNESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http_client.h"

/* The module (PORTEIRO_NGINX_MODULE) and the nginx binary in use. */
extern const char *module_path;
extern const char *nginx_path;

/* Finds nginx (PORTEIRO_NGINX, else PATH, else /usr/sbin and
 * /usr/local/sbin: Debian's is /usr/sbin/nginx, off a user's PATH) and the
 * module. 0: both there; 77: the test is rightly skipped (the module was
 * not asked for: PORTEIRO_NGINX_OFF=1 from -DPORTEIRO_NGINX=OFF, or
 * nginx-dev is not installed, so nothing could build it); 1: a failure
 * (nginx-dev is installed but the module or nginx is missing: a skip
 * there would hide a broken build). Says which on stdout. Also ignores
 * SIGPIPE and kills at exit the masters a failed test left running. */
int ngx_harness_init(void);

typedef struct ngx {
    char prefix[64];
    char conf[128];
    int port;
    pid_t pid; /* the master */
} ngx;

/* Writes prefix/nginx.conf: the module, `workers` workers, then http_body
 * inside http { } with %PORT% the listening port and %ROOT% the static
 * files (index.html says "ok"). */
void ngx_write(ngx *n, int workers, const char *http_body);
/* nginx -p prefix -c conf [flag], its output into out_path. */
pid_t ngx_spawn(const ngx *n, const char *flag, const char *out_path);
/* nginx -t: its exit status, and what it printed in out. */
int ngx_test_conf(ngx *n, char *out, size_t outlen);
/* Starts the master and waits for the probe (below) to answer. */
void ngx_start(ngx *n);
bool ngx_file_has(const ngx *n, const char *file, const char *text);
/* A line of prefix/file holds both a and b (b NULL: a alone). */
bool ngx_line_has(const ngx *n, const char *file, const char *a, const char *b);
/* ngx_line_has, waited for up to timeout_ms; true when it came. */
bool ngx_wait_line(const ngx *n, const char *file, const char *a, const char *b, int timeout_ms);
/* The master's children (its workers): how many, at most max in pids. */
int ngx_worker_pids(const ngx *n, pid_t *pids, int max);
/* Fast shutdown (SIGTERM), the master waited for; ngx_stop then only
 * checks the logs and removes the folder. */
void ngx_kill_fast(ngx *n);
/* A connection to 127.0.0.1:port with req written on it: its fd. */
int ngx_raw_send(int port, const char *req);
bool ngx_log_has(const ngx *n, const char *text);
/* Graceful stop (SIGQUIT), then: no worker died of a signal, no sanitizer
 * finding; the folder removed (kept with PORTEIRO_KEEP). */
void ngx_stop(ngx *n);
void kill_masters(void);

/* The start-up probe: answered in the rewrite phase, so never counted. A
 * format string (snprintf) piece. */
#define PROBE "  server { listen 127.0.0.1:%%PORT%%; location = /_probe_ { return 204; }\n"

/* The setup most tests share: nginx with `workers` workers deciding on the
 * Redis at url (porteiro_timeout 2s), one server (the probe, root %ROOT%)
 * holding server_body, started. */
void ngx_start_on(ngx *n, const char *url, int workers, const char *server_body);
/* A static file under %ROOT% that says "ok" (a location's target). */
void ngx_www_file(const ngx *n, const char *name);

/* ---- load: threads of clients, one connection per request ---- */

typedef struct load {
    int ports[2], nports;
    const char *target;
    const char *headers;
    int per_thread;
    _Atomic int passed, limited, other, sent, fallback;
    _Atomic bool stop; /* run until told (per_thread 0) */
} load;

#define THREADS 16

/* One GET on a connection of its own, thread-safe (http_client.c keeps
 * static buffers): the status (0: no answer), and X-Status into xs. */
int tget(int port, const char *target, const char *headers, char *xs, size_t xslen);
/* The same, with the response header `name` into xs. */
int tget_header(int port, const char *target, const char *headers, const char *name, char *xs,
                size_t xslen);
/* A load thread: requests until per_thread are sent (or stop is set). */
void *client(void *arg);
/* THREADS threads of client() until each is done. */
void run_load(load *l);
/* One GET (http_client.c); its status. */
int get(int port, const char *target, const char *headers, http_response *r);
/* The units spent of `limit` (compact form, e.g. "fixed_window 10/1h")
 * for key on the Redis at url: L - remaining, read with a peek (nothing
 * written). */
int64_t redis_spent(const char *url, const char *limit, const char *key);
/* A response header's value, "" when absent (a static buffer). */
const char *header(const http_response *r, const char *name);

#endif
