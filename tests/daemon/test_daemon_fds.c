/* test_daemon_fds.c — porteirod when file descriptors run out (issue 33):
 * its RLIMIT_NOFILE lowered (prlimit) to two free descriptors, ten clients
 * connect to each of its listeners (decision, admin, gRPC, SPOE); each
 * listener stops accepting for 500 ms at a time instead of spinning on
 * accept() (nginx's behaviour): porteirod's CPU time over a second stays
 * low, each listener's failure is logged once; once the clients leave and
 * descriptors are free, each accepts again (and answers), and says so once. */
#define _GNU_SOURCE /* prlimit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

/* The process's user + system CPU time, in seconds (/proc/PID/stat). */
static double cpu_of(pid_t pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name */
    assert_non_null(p);
    unsigned long long utime = 0, stime = 0;
    /* fields 3.. after ") ": state ppid pgrp session tty tpgid flags minflt
     * cminflt majflt cmajflt utime stime */
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime), 2);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The lowest descriptor limit that leaves pid `spare` free descriptors. */
static rlim_t limit_leaving(pid_t pid, int spare) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    static bool used[65536];
    memset(used, 0, sizeof(used));
    DIR *d = opendir(path);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long fd = strtol(e->d_name, NULL, 10);
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd < 65536)
            used[fd] = true;
    }
    closedir(d);
    rlim_t l = 0;
    for (int free_below = 0; free_below < spare; l++)
        free_below += !used[l];
    return l;
}

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static int count_in_log(const test_daemon *d, const char *text) {
    FILE *f = fopen(d->log, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* porteirod's /metrics: worker 0's connections accepted on `listener`
 * (http, grpc, spoe). */
static long long accepted_on(int port, const char *listener) {
    http_response r;
    assert_int_equal(http_request(port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    char want[128];
    snprintf(want, sizeof(want),
             "porteirod_worker_connections_total{worker=\"0\",listener=\"%s\"} ", listener);
    const char *at = strstr(r.body, want);
    assert_non_null(at);
    return atoll(at + strlen(want));
}

/* Every listener of porteirod runs out (the accept pause is daemon/net/'s,
 * shared): the decision, admin, gRPC and SPOE listeners, ten clients each. */
static void out_of_descriptors(void **state) {
    (void)state;
    int admin = test_free_port(), grpc = test_free_port(), spoe = test_free_port();
    char yaml[512], grpc_listen[64];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nadmin:\n  listen: 127.0.0.1:%d\n"
             "spoe:\n  listen: 127.0.0.1:%d\n"
             "policies:\n  api:\n    limits: [fixed_window 5/366d]\n",
             admin, spoe);
    snprintf(grpc_listen, sizeof(grpc_listen), "127.0.0.1:%d", grpc);
    const char *args[] = {"--grpc-listen", grpc_listen, NULL};
    test_daemon d;
    test_daemon_must_start(&d, yaml, args);
    http_response r;
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    for (int i = 0; i < 100 && http_request(admin, "GET", "/healthz", NULL, NULL, &r) != 0; i++)
        test_sleep_ms(20);
    assert_int_equal(r.status, 200);
    struct rlimit old, low;
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(d.pid, 2);
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    /* Two are accepted (on the decision listener, the first to be asked);
     * the rest wait in the backlogs, accept() failing on each listener. */
    enum { CLIENTS = 10, LISTENERS = 4 };
    const int ports[LISTENERS] = {d.port, admin, grpc, spoe};
    const char *names[LISTENERS] = {"decision", "admin", "gRPC", "SPOE"};
    int fds[LISTENERS][CLIENTS];
    for (int l = 0; l < LISTENERS; l++)
        for (int i = 0; i < CLIENTS; i++)
            fds[l][i] = connect_port(ports[l]);
    test_sleep_ms(300);
    double before = cpu_of(d.pid);
    test_sleep_ms(1000);
    double used = cpu_of(d.pid) - before;
    fprintf(stderr, "out of descriptors on 4 listeners: porteirod used %.2f s of CPU in 1 s\n",
            used);
    assert_true(used < 0.25);
    char line[96];
    for (int l = 0; l < LISTENERS; l++) {
        snprintf(line, sizeof(line), "port %d: accept failed: too many open files", ports[l]);
        fprintf(stderr, "%s listener: \"%s\" logged %d time(s)\n", names[l], line,
                count_in_log(&d, line));
        assert_int_equal(count_in_log(&d, line), 1);
    }
    /* The clients leave and the limit is back: descriptors are free, each
     * listener accepts again at its next try (the decision and admin
     * listeners answer; the gRPC and SPOE ones accept what waited in their
     * backlogs). (Under the low limit, 38 waiting connections would take
     * the 2 free descriptors in turns for seconds.) */
    for (int l = 0; l < LISTENERS; l++)
        for (int i = 0; i < CLIENTS; i++)
            close(fds[l][i]);
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
    const int answering[] = {d.port, admin};
    for (int k = 0; k < 2; k++) {
        int status = 0;
        for (int i = 0; i < 100 && status != 200; i++) {
            test_sleep_ms(50);
            if (http_request(answering[k], "GET", "/healthz", NULL, NULL, &r) == 0)
                status = r.status;
        }
        assert_int_equal(status, 200);
    }
    long long g = 0, sp = 0;
    for (int i = 0; i < 60 && (g < CLIENTS || sp < CLIENTS); i++, test_sleep_ms(50)) {
        g = accepted_on(d.port, "grpc");
        sp = accepted_on(d.port, "spoe");
    }
    fprintf(stderr, "accepted again: gRPC %lld, SPOE %lld of %d each\n", g, sp, CLIENTS);
    assert_true(g >= CLIENTS && sp >= CLIENTS);
    /* Said once per listener, a second after its last failure. */
    for (int i = 0; i < 60 && count_in_log(&d, "accepting connections again") < LISTENERS; i++)
        test_sleep_ms(50);
    for (int l = 0; l < LISTENERS; l++) {
        snprintf(line, sizeof(line), "port %d: accepting connections again", ports[l]);
        assert_int_equal(count_in_log(&d, line), 1);
    }
    assert_int_equal(count_in_log(&d, "accept failed"), LISTENERS);
    test_daemon_must_finish(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(out_of_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
