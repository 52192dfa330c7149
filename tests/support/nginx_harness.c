/* nginx_harness.c — nginx with ngx_http_porteiro_module for the tests
 * (nginx_harness.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nginx_harness.h"
#include "porteiro.h"
#include "redis_server.h"

const char *module_path;
const char *nginx_path;

static char nginx_found[512];

/* An executable nginx: PORTEIRO_NGINX, else on PATH, else the sbin folders. */
static const char *find_nginx(void) {
    const char *env = getenv("PORTEIRO_NGINX");
    if (env != NULL && env[0] != '\0')
        return access(env, X_OK) == 0 ? env : NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s:/usr/sbin:/usr/local/sbin:/usr/local/nginx/sbin",
             getenv("PATH") != NULL ? getenv("PATH") : "/usr/bin:/bin");
    for (char *save = NULL, *dir = strtok_r(path, ":", &save); dir != NULL;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(nginx_found, sizeof(nginx_found), "%s/nginx", dir);
        if (access(nginx_found, X_OK) == 0)
            return nginx_found;
    }
    return NULL;
}

int ngx_harness_init(void) {
    module_path = getenv("PORTEIRO_NGINX_MODULE");
    nginx_path = find_nginx();
    bool module_ok = module_path != NULL && access(module_path, R_OK) == 0;
    if (module_ok && nginx_path != NULL) {
        signal(SIGPIPE, SIG_IGN);
        atexit(kill_masters);
        return 0;
    }
    const char *off = getenv("PORTEIRO_NGINX_OFF");
    bool dev = access("/usr/share/nginx/src/conf_flags", R_OK) == 0;
    if ((off != NULL && strcmp(off, "1") == 0) || !dev) {
        printf("skipped: %s\n", dev ? "built with -DPORTEIRO_NGINX=OFF"
                                    : "nginx-dev is not installed (nothing builds the module)");
        return 77;
    }
    printf("FAILED: nginx-dev is installed but %s\n",
           !module_ok ? "the module was not built (PORTEIRO_NGINX_MODULE; see build/nginx/"
                        "ngx-configure.log)"
                      : "no nginx binary (PATH, /usr/sbin, /usr/local/sbin; PORTEIRO_NGINX)");
    return 1;
}

/* Writes prefix/nginx.conf: the module, `workers` workers, then http_body
 * inside http { } with %PORT% the listening port and %ROOT% the static
 * files (index.html says "ok"). */
void ngx_write(ngx *n, int workers, const char *http_body) {
    if (n->prefix[0] == '\0') {
        snprintf(n->prefix, sizeof(n->prefix), "/tmp/porteiro-ngxmod-XXXXXX");
        assert_non_null(mkdtemp(n->prefix));
        n->port = test_free_port();
        char path[160];
        snprintf(path, sizeof(path), "%s/www", n->prefix);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/www/index.html", n->prefix);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("ok\n", f);
        fclose(f);
    }
    snprintf(n->conf, sizeof(n->conf), "%s/nginx.conf", n->prefix);
    char port[16];
    snprintf(port, sizeof(port), "%d", n->port);
    FILE *f = fopen(n->conf, "w");
    assert_non_null(f);
    fprintf(f,
            "load_module %s;\n"
            "daemon off;\n"
            "worker_processes %d;\n"
            "error_log %s/error.log info;\n"
            "pid %s/nginx.pid;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "  access_log off;\n"
            "  client_body_temp_path %s; proxy_temp_path %s; fastcgi_temp_path %s;\n"
            "  uwsgi_temp_path %s; scgi_temp_path %s;\n",
            module_path, workers, n->prefix, n->prefix, n->prefix, n->prefix, n->prefix, n->prefix,
            n->prefix);
    for (const char *p = http_body; *p != '\0';) {
        if (strncmp(p, "%PORT%", 6) == 0) {
            fputs(port, f);
            p += 6;
        } else if (strncmp(p, "%ROOT%", 6) == 0) {
            fprintf(f, "%s/www", n->prefix);
            p += 6;
        } else {
            fputc(*p++, f);
        }
    }
    fputs("}\n", f);
    fclose(f);
}

pid_t ngx_spawn(const ngx *n, const char *flag, const char *out_path) {
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* nginx and its workers: one group, for ngx_stop */
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        const char *preload = getenv("PORTEIRO_NGINX_PRELOAD");
        if (preload != NULL && preload[0] != '\0') {
            setenv("LD_PRELOAD", preload, 1);
            /* nginx frees nothing at exit by design: no leak report; any
             * other finding aborts the worker (a signal the log shows). */
            setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
            setenv("UBSAN_OPTIONS", "halt_on_error=1:abort_on_error=1:print_stacktrace=1", 1);
        }
        if (flag != NULL)
            execl(nginx_path, "nginx", "-p", n->prefix, "-c", n->conf, flag, (char *)NULL);
        else
            execl(nginx_path, "nginx", "-p", n->prefix, "-c", n->conf, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* nginx -t: its exit status, and what it printed in out. */
int ngx_test_conf(ngx *n, char *out, size_t outlen) {
    char path[160];
    snprintf(path, sizeof(path), "%s/t.out", n->prefix);
    pid_t pid = ngx_spawn(n, "-t", path);
    int st;
    waitpid(pid, &st, 0);
    FILE *f = fopen(path, "r");
    size_t k = f != NULL ? fread(out, 1, outlen - 1, f) : 0;
    out[k] = '\0';
    if (f != NULL)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Masters still running when a failed assertion leaves a test: stopped at
 * exit, by pid. */
static pid_t masters[8];

void kill_masters(void) {
    for (size_t i = 0; i < sizeof(masters) / sizeof(masters[0]); i++)
        if (masters[i] > 0) {
            kill(-masters[i], SIGKILL); /* the master and its workers */
            waitpid(masters[i], NULL, 0);
        }
}

static void track(pid_t pid, bool on) {
    for (size_t i = 0; i < sizeof(masters) / sizeof(masters[0]); i++)
        if (on ? masters[i] == 0 : masters[i] == pid) {
            masters[i] = on ? pid : 0;
            return;
        }
}

void ngx_start(ngx *n) {
    char path[160];
    snprintf(path, sizeof(path), "%s/nginx.out", n->prefix);
    n->pid = ngx_spawn(n, NULL, path);
    track(n->pid, true);
    for (int i = 0; i < 500; i++) {
        http_response r;
        if (http_request(n->port, "GET", "/_probe_", NULL, NULL, &r) == 0 && r.status == 204)
            return;
        assert_int_not_equal(waitpid(n->pid, NULL, WNOHANG), n->pid);
        test_sleep_ms(10);
    }
    fail_msg("nginx did not start (%s)", path);
}

bool ngx_file_has(const ngx *n, const char *file, const char *text) {
    char path[160], line[4096];
    snprintf(path, sizeof(path), "%s/%s", n->prefix, file);
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, text) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

bool ngx_log_has(const ngx *n, const char *text) {
    return ngx_file_has(n, "error.log", text);
}

bool ngx_line_has(const ngx *n, const char *file, const char *a, const char *b) {
    char path[160], line[8192];
    snprintf(path, sizeof(path), "%s/%s", n->prefix, file);
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
    if (f != NULL)
        fclose(f);
    return found;
}

bool ngx_wait_line(const ngx *n, const char *file, const char *a, const char *b, int timeout_ms) {
    for (int64_t end = test_mono_ms() + timeout_ms;; test_sleep_ms(10)) {
        if (ngx_line_has(n, file, a, b))
            return true;
        if (test_mono_ms() > end)
            return false;
    }
}

int ngx_worker_pids(const ngx *n, pid_t *pids, int max) {
    char path[96], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)n->pid, (int)n->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t k = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[k] = '\0';
    int count = 0;
    for (char *p = buf, *end; count < max; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        pids[count++] = (pid_t)v;
    }
    return count;
}

void ngx_kill_fast(ngx *n) {
    kill(n->pid, SIGTERM);
    int st = 0;
    waitpid(n->pid, &st, 0);
    track(n->pid, false);
    n->pid = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the nginx master did not exit cleanly (status %d; %s/error.log)", st, n->prefix);
}

int ngx_raw_send(int port, const char *req) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    size_t len = strlen(req);
    assert_int_equal(write(fd, req, len), (ssize_t)len);
    return fd;
}

void ngx_stop(ngx *n) {
    if (n->pid > 0) {
        kill(n->pid, SIGQUIT);
        int st = 0;
        waitpid(n->pid, &st, 0);
        /* Workers must not outlive their master. They did under ASan when
         * the master aborted on a reload (its sanitizer report went to
         * error.log, where nginx sends stderr once configured): the module
         * is now linked -Bsymbolic (nginx/CMakeLists.txt). Killed here,
         * and a failure. */
        bool orphans = kill(-n->pid, 0) == 0;
        if (orphans) {
            fprintf(stderr, "nginx %d: workers outlived the master; killed\n", (int)n->pid);
            kill(-n->pid, SIGKILL);
        }
        track(n->pid, false);
        n->pid = 0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("the nginx master did not exit cleanly (status %d; %s/error.log)", st,
                     n->prefix);
        assert_false(orphans);
    }
    /* No worker died of a signal (a crash, or a sanitizer's abort). */
    assert_false(ngx_log_has(n, "exited on signal"));
    assert_false(ngx_file_has(n, "nginx.out", "AddressSanitizer"));
    assert_false(ngx_file_has(n, "nginx.out", "runtime error"));
    assert_false(ngx_log_has(n, "AddressSanitizer"));
    assert_false(ngx_log_has(n, "runtime error"));
    char cmd[128];
    if (getenv("PORTEIRO_KEEP") != NULL) /* for a post-mortem */
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", n->prefix);
    assert_int_equal(system(cmd), 0);
}

/* The setup most tests share: nginx with `workers` workers deciding on the
 * Redis at url (porteiro_timeout 2s), one server (the probe, root %ROOT%)
 * holding server_body, started. */
void ngx_start_on(ngx *n, const char *url, int workers, const char *server_body) {
    char body[4096];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n" PROBE "    root %%ROOT%%;\n%s  }\n",
             url, server_body);
    ngx_write(n, workers, body);
    ngx_start(n);
}

/* A static file under %ROOT% that says "ok" (a location's target). */
void ngx_www_file(const ngx *n, const char *name) {
    char path[256];
    snprintf(path, sizeof(path), "%s/www/%s", n->prefix, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("ok\n", f);
    fclose(f);
}

/* ---- load: threads of clients, one connection per request ---- */

/* One GET on a connection of its own, thread-safe (http_client.c keeps
 * static buffers): the status (0: no answer), and X-Status into xs. */
int tget(int port, const char *target, const char *headers, char *xs, size_t xslen) {
    return tget_header(port, target, headers, "X-Status", xs, xslen);
}

int tget_header(int port, const char *target, const char *headers, const char *name, char *xs,
                size_t xslen) {
    xs[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return 0;
    }
    char req[512], buf[8192];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n",
                     target, headers != NULL ? headers : "");
    size_t got = 0;
    if (write(fd, req, (size_t)n) == n) {
        ssize_t k;
        while (got < sizeof(buf) - 1 && (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
        return 0;
    char field[64];
    snprintf(field, sizeof(field), "\r\n%s: ", name);
    const char *h = strstr(buf, field);
    if (h != NULL) {
        h += strlen(field);
        snprintf(xs, xslen, "%.*s", (int)strcspn(h, "\r\n"), h);
    }
    return status;
}

void *client(void *arg) {
    load *l = arg;
    for (int i = 0; l->per_thread == 0 ? !atomic_load(&l->stop) : i < l->per_thread; i++) {
        int port = l->ports[i % l->nports];
        char st[64];
        atomic_fetch_add(&l->sent, 1);
        int status = tget(port, l->target, l->headers, st, sizeof(st));
        if (status == 200)
            atomic_fetch_add(&l->passed, 1);
        else if (status == 429)
            atomic_fetch_add(&l->limited, 1);
        else
            atomic_fetch_add(&l->other, 1);
        if (strcmp(st, "FALLBACK") == 0)
            atomic_fetch_add(&l->fallback, 1);
    }
    return NULL;
}

void run_load(load *l) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, client, l), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
}

int get(int port, const char *target, const char *headers, http_response *r) {
    assert_int_equal(http_request(port, "GET", target, headers, NULL, r), 0);
    return r->status;
}

const char *header(const http_response *r, const char *name) {
    static char buf[512];
    return http_header(r, name, buf, sizeof(buf)) != NULL ? buf : "";
}
int64_t redis_spent(const char *url, const char *limit, const char *key) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 5000;
    o.connect_timeout_ms = 5000;
    char err[256];
    porteiro_status st;
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    assert_non_null(p);
    porteiro_limit l;
    assert_int_equal(porteiro_parse_limit(limit, &l, err, sizeof(err)), PORTEIRO_OK);
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, &l, key, 0, &d), PORTEIRO_OK);
    porteiro_free(p);
    return d.limit - d.remaining;
}
