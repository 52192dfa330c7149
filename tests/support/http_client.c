/* http_client.c — raw-socket HTTP for tests, and porteirod as a child. */
#include "http_client.h"
#include "redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#define MAX_DAEMONS 16

/* The pids of daemons still running, so a failed assertion (cmocka jumps
 * out of the test) cannot leave one behind: they are killed at exit. */
static pid_t running[MAX_DAEMONS];

static void kill_running(void) {
    for (int i = 0; i < MAX_DAEMONS; i++)
        if (running[i] > 0) {
            kill(running[i], SIGKILL);
            waitpid(running[i], NULL, 0);
            running[i] = 0;
        }
}

static void track(pid_t pid, bool on) {
    static bool hooked;
    if (!hooked) {
        hooked = true;
        atexit(kill_running);
    }
    for (int i = 0; i < MAX_DAEMONS; i++) {
        if (!on && running[i] == pid) {
            running[i] = 0;
            return;
        }
        if (on && running[i] == 0) {
            running[i] = pid;
            return;
        }
    }
}

static int connect_to(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Splits "HTTP/1.1 200 OK\r\nheaders\r\n\r\nbody" into out. */
static int parse_response(const char *buf, size_t len, http_response *out) {
    const char *end = NULL;
    for (size_t i = 0; i + 3 < len && end == NULL; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
            end = buf + i;
    if (end == NULL || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1)
        return -1;
    size_t head = (size_t)(end - buf) + 2;
    if (head >= sizeof(out->head))
        return -1;
    memcpy(out->head, buf, head);
    out->head[head] = '\0';
    out->body_len = len - head - 2;
    if (out->body_len >= sizeof(out->body))
        out->body_len = sizeof(out->body) - 1;
    memcpy(out->body, end + 4, out->body_len);
    out->body[out->body_len] = '\0';
    return 0;
}

int http_raw(int port, const char *raw, size_t len, int timeout_ms, http_response *out) {
    static char buf[sizeof(out->head) + sizeof(out->body) + 16];
    memset(out, 0, sizeof(*out));
    int fd = connect_to(port);
    if (fd < 0)
        return -1;
    size_t sent = 0, got = 0;
    while (sent < len) {
        ssize_t n = send(fd, raw + sent, len - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may close early (a refused request): read what it said */
        sent += (size_t)n;
    }
    int64_t deadline = test_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - test_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return parse_response(buf, got, out);
}

int http_request(int port, const char *method, const char *target, const char *extra_headers,
                 const char *body, http_response *out) {
    static char req[96 * 1024];
    size_t blen = body != NULL ? strlen(body) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, target, extra_headers ? extra_headers : "", blen, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof(req))
        return -1;
    return http_raw(port, req, (size_t)n, 3000, out);
}

const char *http_header(const http_response *r, const char *name, char *buf, size_t buflen) {
    size_t nlen = strlen(name);
    for (const char *line = strstr(r->head, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t vlen = e != NULL ? (size_t)(e - v) : strlen(v);
            snprintf(buf, buflen, "%.*s", (int)vlen, v);
            return buf;
        }
    }
    return NULL;
}

double http_metric_in(const char *body, const char *name) {
    size_t len = strlen(name);
    for (const char *at = strstr(body, name); at != NULL; at = strstr(at + 1, name))
        if ((at == body || at[-1] == '\n') && at[len] == ' ')
            return atof(at + len + 1);
    return -1;
}

double http_metric(int port, const char *name) {
    http_response r;
    if (http_request(port, "GET", "/metrics", NULL, NULL, &r) != 0 || r.status != 200)
        return -1;
    return http_metric_in(r.body, name);
}

int http_workers_served(int port, bool admin, int n, const char *listener) {
    http_response r;
    if (http_request(port, "GET", "/metrics", NULL, NULL, &r) != 0 || r.status != 200)
        return -1;
    int served = 0;
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof(name),
                 "porteirod_worker_connections_total{worker=\"%d\",listener=\"%s\"}", i, listener);
        double v = http_metric_in(r.body, name);
        bool own = !admin && strcmp(listener, "http") == 0;
        printf("worker %d: %.0f %s connections\n", i, v, listener);
        served += v >= (own ? 2 : 1);
    }
    return served;
}

/* Replaces every "%PORT%" of yaml with the daemon's port. */
int test_daemon_write_config(test_daemon *d, const char *yaml) {
    FILE *f = fopen(d->config, "w");
    if (f == NULL)
        return -1;
    for (const char *p = yaml; *p != '\0';) {
        if (strncmp(p, "%PORT%", 6) == 0) {
            fprintf(f, "%d", d->port);
            p += 6;
        } else {
            fputc(*p++, f);
        }
    }
    return fclose(f);
}

static int accepts(int port) {
    int fd = connect_to(port);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

int test_daemon_start(test_daemon *d, const char *yaml, const char *const *extra_args) {
    const char *bin = getenv("PORTEIROD");
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/porteirod-test-XXXXXX");
    if (bin == NULL || mkdtemp(d->dir) == NULL)
        return -1;
    snprintf(d->config, sizeof(d->config), "%s/porteirod.yaml", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/porteirod.log", d->dir);
    d->port = test_free_port();
    if (d->port <= 0 || test_daemon_write_config(d, yaml) != 0)
        return -1;
    const char *argv[32] = {bin, "--config", d->config};
    int argc = 3;
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL && argc < 31; i++)
        argv[argc++] = extra_args[i];
    argv[argc] = NULL;
    signal(SIGPIPE, SIG_IGN);
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    track(d->pid, true);
    for (int i = 0; i < 300; i++) { /* up to 3 s */
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            track(d->pid, false);
            d->pid = 0;
            return -1;
        }
        if (accepts(d->port))
            return 0;
        test_sleep_ms(10);
    }
    return -1;
}

int test_daemon_signal_wait(test_daemon *d, int sig, int timeout_ms) {
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    int64_t deadline = test_mono_ms() + timeout_ms;
    while (test_mono_ms() < deadline) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            track(d->pid, false);
            d->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        test_sleep_ms(5);
    }
    return -1;
}

void test_daemon_stop(test_daemon *d) {
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        track(d->pid, false);
        d->pid = 0;
    }
    if (d->dir[0] != '\0') {
        unlink(d->config);
        unlink(d->log);
        rmdir(d->dir);
        d->dir[0] = '\0';
    }
}

int test_daemon_log_contains(const test_daemon *d, const char *text) {
    static char buf[256 * 1024];
    FILE *f = fopen(d->log, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

int test_run(const char *const *argv, char *out, size_t outlen) {
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t n;
    while ((n = read(pipefd[0], out + got, outlen - 1 - got)) > 0 && got < outlen - 1)
        got += (size_t)n;
    out[got] = '\0';
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void test_daemon_must_start(test_daemon *d, const char *yaml, const char *const *extra_args) {
    int rc = test_daemon_start(d, yaml, extra_args);
    if (rc != 0) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    assert_int_equal(rc, 0);
}

void test_daemon_must_finish(test_daemon *d) {
    assert_int_equal(test_daemon_signal_wait(d, SIGTERM, 5000), 0);
    assert_false(test_daemon_log_contains(d, "Sanitizer"));
    assert_false(test_daemon_log_contains(d, "runtime error"));
    test_daemon_stop(d);
}
