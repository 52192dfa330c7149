/* test_auth_request.c — a real nginx (auth_request) in front of a backend, asking
 * porteirod; the nginx configuration is examples/auth_request/nginx.conf itself,
 * with its ports moved to free ones. From outside: N requests, exactly L
 * reach the backend, the others get 429 with Retry-After and RateLimit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

#define REQUESTS 12
#define LIMIT 5

static const char *const CONFIG = "listen: 127.0.0.1:%PORT%\n"
                                  "policies:\n"
                                  "  api:\n"
                                  "    limits:\n"
                                  "      - token_bucket 5/1h\n"
                                  "    key: header X-Api-Key\n";

/* Copies text to f with every occurrence of from replaced by to. */
static void replace_all(char *text, const char *from, const char *to) {
    static char out[64 * 1024];
    size_t n = 0, flen = strlen(from), tlen = strlen(to);
    for (const char *p = text; *p != '\0';) {
        if (strncmp(p, from, flen) == 0 && n + tlen < sizeof(out)) {
            memcpy(out + n, to, tlen);
            n += tlen;
            p += flen;
        } else if (n + 1 < sizeof(out)) {
            out[n++] = *p++;
        } else {
            break;
        }
    }
    out[n] = '\0';
    strcpy(text, out);
}

static char *read_example(void) {
    static char text[64 * 1024];
    char path[512];
    snprintf(path, sizeof(path), "%s/examples/auth_request/nginx.conf",
             getenv("PORTEIRO_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static size_t count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int c;
    if (f == NULL)
        return 0;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static pid_t start_nginx(const char *prefix, const char *conf, int port) {
    char log[600];
    snprintf(log, sizeof(log), "%s/nginx.stderr", prefix);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, STDERR_FILENO);
        execlp("nginx", "nginx", "-p", prefix, "-c", conf, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) {
        http_response r;
        if (http_request(port, "GET", "/_probe_", NULL, NULL, &r) == 0)
            return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            break;
        test_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void auth_request_lets_exactly_the_limit_through(void **state) {
    (void)state;
    test_daemon d;
    assert_int_equal(test_daemon_start(&d, CONFIG, NULL), 0);

    char prefix[] = "/tmp/porteiro-nginx-XXXXXX";
    assert_non_null(mkdtemp(prefix));
    char tmp[600], conf[600], backend_log[600];
    snprintf(tmp, sizeof(tmp), "%s/tmp", prefix);
    assert_int_equal(mkdir(tmp, 0700), 0);
    snprintf(conf, sizeof(conf), "%s/nginx.conf", prefix);
    snprintf(backend_log, sizeof(backend_log), "%s/backend.log", prefix);

    int front = test_free_port(), backend = test_free_port();
    char text_port[64];
    char *text = read_example();
    snprintf(text_port, sizeof(text_port), "127.0.0.1:%d", d.port);
    replace_all(text, "127.0.0.1:8080", text_port);
    snprintf(text_port, sizeof(text_port), "127.0.0.1:%d", backend);
    replace_all(text, "127.0.0.1:8001", text_port);
    snprintf(text_port, sizeof(text_port), "127.0.0.1:%d", front);
    replace_all(text, "127.0.0.1:8000", text_port);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);

    pid_t nginx = start_nginx(prefix, conf, front);
    assert_true(nginx > 0);
    size_t probes = count_lines(backend_log); /* the start-up probe reached it */

    int ok = 0, limited = 0;
    for (int i = 0; i < REQUESTS; i++) {
        http_response r;
        char buf[256];
        assert_int_equal(http_request(front, "GET", "/", "X-Api-Key: client-1\r\n", NULL, &r), 0);
        assert_non_null(http_header(&r, "RateLimit-Policy", buf, sizeof(buf)));
        assert_string_equal(buf, "\"api\";q=5;w=3600");
        assert_non_null(http_header(&r, "RateLimit", buf, sizeof(buf)));
        if (r.status == 200) {
            ok++;
            assert_non_null(strstr(r.body, "hello from the backend"));
            continue;
        }
        assert_int_equal(r.status, 429);
        limited++;
        assert_memory_equal(buf, "\"api\";r=0;t=", 12);
        assert_non_null(http_header(&r, "Retry-After", buf, sizeof(buf)));
        assert_string_equal(buf, "720"); /* 1 token per 3600/5 s */
    }
    assert_int_equal(ok, LIMIT);
    assert_int_equal(limited, REQUESTS - LIMIT);
    assert_int_equal(count_lines(backend_log) - probes, LIMIT);
    printf("nginx: %d requests -> %d reached the backend, %d got 429\n", REQUESTS, ok, limited);

    kill(nginx, SIGQUIT);
    waitpid(nginx, NULL, 0);
    assert_int_equal(test_daemon_signal_wait(&d, SIGTERM, 3000), 0);
    test_daemon_stop(&d);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", prefix);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    if (!test_find_program("nginx")) /* Debian's is in /usr/sbin */
        printf("nginx is not on PATH, nor in /usr/sbin\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(auth_request_lets_exactly_the_limit_through)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
