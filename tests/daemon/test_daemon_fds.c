/* test_daemon_fds.c — porteirod when file descriptors run out (issue 33):
 * its RLIMIT_NOFILE lowered (prlimit) to two free descriptors, ten clients
 * connect; the listener stops accepting for 500 ms at a time instead of
 * spinning on accept() (nginx's behaviour): porteirod's CPU time over a
 * second stays low, the failure is logged once; once the clients leave and
 * descriptors are free, it accepts again and answers, and says so once. */
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

static void out_of_descriptors(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d,
                           "listen: 127.0.0.1:%PORT%\n"
                           "policies:\n  api:\n    limits: [fixed_window 5/366d]\n",
                           NULL);
    http_response r;
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    struct rlimit old, low;
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(d.pid, 2);
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    /* Two are accepted; the rest wait in the backlog, accept() failing. */
    enum { CLIENTS = 10 };
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fds[i] = connect_port(d.port);
    test_sleep_ms(300);
    double before = cpu_of(d.pid);
    test_sleep_ms(1000);
    double used = cpu_of(d.pid) - before;
    fprintf(stderr, "out of descriptors: porteirod used %.2f s of CPU in 1 s\n", used);
    assert_true(used < 0.25);
    assert_int_equal(count_in_log(&d, "accept failed: too many open files"), 1);
    /* The clients leave: the descriptors come free, it accepts again. */
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    int status = 0;
    for (int i = 0; i < 100 && status != 200; i++) {
        test_sleep_ms(50);
        if (http_request(d.port, "GET", "/healthz", NULL, NULL, &r) == 0)
            status = r.status;
    }
    assert_int_equal(status, 200);
    /* Said once, a second after the last failure. */
    for (int i = 0; i < 60 && count_in_log(&d, "accepting connections again") == 0; i++)
        test_sleep_ms(50);
    assert_int_equal(count_in_log(&d, "accepting connections again"), 1);
    assert_int_equal(count_in_log(&d, "accept failed"), 1);
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &old, NULL), 0);
    test_daemon_must_finish(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(out_of_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
