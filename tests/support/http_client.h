/* http_client.h — test support: a tiny HTTP/1.1 client over a raw socket
 * (so tests can also send what no well-behaved client would), and porteirod
 * started and stopped as a child process. */
#ifndef TEST_HTTP_CLIENT_H
#define TEST_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct http_response {
    int status;      /* 0: no status line came back (connection closed) */
    char head[8192]; /* the header block, NUL-terminated */
    char body[65536];
    size_t body_len;
} http_response;

/* Sends raw bytes to 127.0.0.1:port and reads until the server closes (or
 * timeout_ms passes). Returns 0 when a response was parsed, -1 otherwise. */
int http_raw(int port, const char *raw, size_t len, int timeout_ms, http_response *out);
/* A request with "Connection: close"; extra_headers are "Name: value\r\n" lines. */
int http_request(int port, const char *method, const char *target, const char *extra_headers,
                 const char *body, http_response *out);
/* The value of a response header (case-insensitive), copied into buf; NULL if absent. */
const char *http_header(const http_response *r, const char *name, char *buf, size_t buflen);
/* The value of the Prometheus line "name value" (no labels) in a /metrics
 * body; -1 if there is no such line. */
double http_metric_in(const char *body, const char *name);
/* The same, read from porteirod's GET /metrics on port; -1 if the request fails. */
double http_metric(int port, const char *name);
/* How many of porteirod's first n workers served connections on listener
 * ("http" or "grpc"), by porteirod_worker_connections_total read from the
 * /metrics of port, the decision listener's or (admin) the admin
 * listener's; -1 if that fails. Read from the decision listener, the read
 * is itself a connection on some worker's HTTP listener: there a worker
 * counts only with two or more. */
int http_workers_served(int port, bool admin, int n, const char *listener);

typedef struct test_daemon {
    pid_t pid;
    int port;
    char dir[256]; /* temporary folder: config and log */
    char config[300];
    char log[300];
} test_daemon;

/* Writes yaml (with "%PORT%" replaced by a free port) to a config file. */
int test_daemon_write_config(test_daemon *d, const char *yaml);
/* Starts porteirod (env PORTEIROD) with the config and extra arguments;
 * waits until it accepts connections. Returns 0, or -1. */
int test_daemon_start(test_daemon *d, const char *yaml, const char *const *extra_args);
/* test_daemon_start inside a cmocka test: fails it, with porteirod's log on
 * stderr, when porteirod does not start. */
void test_daemon_must_start(test_daemon *d, const char *yaml, const char *const *extra_args);
/* SIGTERM inside a cmocka test: fails it unless porteirod exits 0 with no
 * sanitizer report in its log; then stops it. */
void test_daemon_must_finish(test_daemon *d);
/* Sends sig and waits up to timeout_ms; returns the exit status, or -1. */
int test_daemon_signal_wait(test_daemon *d, int sig, int timeout_ms);
/* SIGKILL if still running, and removes the folder. */
void test_daemon_stop(test_daemon *d);
/* True when the daemon's log contains text. */
int test_daemon_log_contains(const test_daemon *d, const char *text);
/* Runs argv (NULL-terminated), capturing stdout+stderr into out; returns the exit status. */
int test_run(const char *const *argv, char *out, size_t outlen);

#endif
