/* test_daemon_ops.c — porteirod under a service manager: the sd_notify
 * messages it sends (READY, RELOADING/READY around SIGHUP, STOPPING,
 * WATCHDOG at half the interval, none for a stuck loop), on a path socket
 * and an abstract one; its log formats (text, json, journal priority
 * prefixes); --version. The notification socket is a datagram socket the
 * test owns, as systemd's would be. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http_client.h"
#include "ops/log.h"
#include "porteiro.h"
#include "redis_server.h"
#include "ops/sd_notify.h"

#define CONFIG                                                                                     \
    "listen: 127.0.0.1:%PORT%\n"                                                                   \
    "policies:\n  api:\n    limits:\n      - token_bucket 3/1h\n"

/* A datagram socket of the test's, in the role of systemd's notify socket. */
typedef struct listener {
    int fd;
    char name[108]; /* what NOTIFY_SOCKET says */
    char dir[64];
} listener;

static void listener_open(listener *l, bool abstract) {
    memset(l, 0, sizeof(*l));
    snprintf(l->dir, sizeof(l->dir), "/tmp/porteiro-notify-XXXXXX");
    assert_non_null(mkdtemp(l->dir));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    socklen_t len;
    if (abstract) {
        snprintf(l->name, sizeof(l->name), "@porteiro-test-%d-%lld", (int)getpid(),
                 (long long)test_mono_ms());
        memcpy(a.sun_path + 1, l->name + 1, strlen(l->name) - 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(l->name));
    } else {
        snprintf(l->name, sizeof(l->name), "%s/notify", l->dir);
        memcpy(a.sun_path, l->name, strlen(l->name) + 1);
        len = sizeof(a);
    }
    l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(l->fd >= 0);
    assert_int_equal(bind(l->fd, (struct sockaddr *)&a, len), 0);
    assert_int_equal(setenv("NOTIFY_SOCKET", l->name, 1), 0);
}

static void listener_close(listener *l) {
    close(l->fd);
    char path[200];
    snprintf(path, sizeof(path), "%s/notify", l->dir);
    unlink(path);
    rmdir(l->dir);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
}

/* The next message within timeout_ms into buf; false if none came. */
static bool next_message(listener *l, int timeout_ms, char *buf, size_t len) {
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1)
        return false;
    ssize_t n = recv(l->fd, buf, len - 1, 0);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* The next message that is not a watchdog ping; fails the test if none. */
static void expect_message(listener *l, const char *starts, const char *contains) {
    char buf[1100];
    int64_t deadline = test_mono_ms() + 5000;
    while (test_mono_ms() < deadline) {
        if (!next_message(l, 100, buf, sizeof(buf)) || strcmp(buf, "WATCHDOG=1") == 0)
            continue;
        if (strncmp(buf, starts, strlen(starts)) != 0 ||
            (contains != NULL && strstr(buf, contains) == NULL))
            fail_msg("got [%s], want [%s...] with [%s]", buf, starts, contains ? contains : "");
        return;
    }
    fail_msg("no [%s] message in 5 s", starts);
}

/* Watchdog pings within ms (other messages are a failure). */
static int count_pings(listener *l, int ms) {
    char buf[1100];
    int n = 0;
    int64_t deadline = test_mono_ms() + ms;
    for (int64_t left; (left = deadline - test_mono_ms()) > 0;) {
        if (!next_message(l, (int)left, buf, sizeof(buf)))
            continue;
        if (strcmp(buf, "WATCHDOG=1") != 0)
            fail_msg("unexpected message [%s]", buf);
        n++;
    }
    return n;
}

static void notify_lifecycle(void **state) {
    (void)state;
    listener l;
    listener_open(&l, false);
    setenv("WATCHDOG_USEC", "400000", 1); /* a ping every 200 ms */
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char want[64];
    snprintf(want, sizeof(want), "listening on 127.0.0.1:%d (memory backend, 1 policies", d.port);
    expect_message(&l, "READY=1\nSTATUS=", want);

    /* 2 s: about 10 pings; a loaded machine may delay or skip some (a loop
     * that did not run in time), never double them. */
    int pings = count_pings(&l, 2000);
    if (pings < 4 || pings > 11)
        fail_msg("%d watchdog pings in 2 s at WATCHDOG_USEC=400000", pings);

    /* A reload: RELOADING=1 (with the monotonic time), then READY=1. */
    test_daemon_write_config(&d, CONFIG "  web:\n    limits:\n      - gcra 5/1s\n");
    kill(d.pid, SIGHUP);
    expect_message(&l, "RELOADING=1\nMONOTONIC_USEC=", NULL);
    expect_message(&l, "READY=1\nSTATUS=", "2 policies");
    /* A failed reload also ends in READY=1: the old config still serves. */
    test_daemon_write_config(&d, "policies: [\n");
    kill(d.pid, SIGHUP);
    expect_message(&l, "RELOADING=1", NULL);
    expect_message(&l, "READY=1\nSTATUS=reload failed", "porteirod.yaml");

    assert_int_equal(test_daemon_signal_wait(&d, SIGTERM, 5000), 0);
    expect_message(&l, "STOPPING=1", NULL);
    test_daemon_stop(&d);
    listener_close(&l);
}

static void notify_abstract_socket(void **state) {
    (void)state;
    listener l;
    listener_open(&l, true);
    setenv("WATCHDOG_USEC", "200000", 1);
    setenv("WATCHDOG_PID", "1", 1); /* the watchdog is another process's */
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    expect_message(&l, "READY=1", NULL);
    assert_int_equal(count_pings(&l, 500), 0);
    assert_int_equal(test_daemon_signal_wait(&d, SIGTERM, 5000), 0);
    expect_message(&l, "STOPPING=1", NULL);
    test_daemon_stop(&d);
    listener_close(&l);
}

/* ---- the watchdog in this process: a stuck loop stops the pings ----- */

static void *run_loop(void *arg) {
    event_base_dispatch(arg);
    return NULL;
}

static void stop_loops(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs base0 (and base1 in a thread when live) for ms; returns the pings.
 * stopping: as after SIGTERM. */
static int watch(listener *l, bool second_loop_live, bool stopping, int ms) {
    struct event_base *b0 = event_base_new(), *b1 = event_base_new();
    assert_true(pd_notify_init());
    pd_watchdog *w = pd_watchdog_new(b0, 2);
    assert_non_null(w);
    assert_int_equal(pd_watchdog_attach(w, 0, b0), 0);
    assert_int_equal(pd_watchdog_attach(w, 1, b1), 0);
    assert_int_equal(pd_watchdog_attach(w, 2, b1), -1);
    if (stopping)
        pd_watchdog_stopping(w);
    pthread_t t;
    struct event *end1 = event_new(b1, -1, 0, stop_loops, b1);
    struct event *end0 = event_new(b0, -1, 0, stop_loops, b0);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(end1, &tv);
    event_add(end0, &tv);
    if (second_loop_live)
        assert_int_equal(pthread_create(&t, NULL, run_loop, b1), 0);
    event_base_dispatch(b0);
    if (second_loop_live)
        pthread_join(t, NULL);
    pd_watchdog_free(w);
    event_free(end0);
    event_free(end1);
    event_base_free(b0);
    event_base_free(b1);
    return count_pings(l, 50);
}

static void watchdog_needs_every_loop(void **state) {
    (void)state;
    listener l;
    listener_open(&l, false);
    setenv("WATCHDOG_USEC", "400000", 1);
    int live = watch(&l, true, false, 2000);
    if (live < 4 || live > 11)
        fail_msg("%d pings in 2 s with both loops running", live);
    /* Loop 1 never runs: the first ping (within its grace) at most. */
    int stuck = watch(&l, false, false, 2000);
    if (stuck > 1)
        fail_msg("%d pings in 2 s with a stuck loop", stuck);
    /* Stopping: no pings (and no complaint about loops that end). */
    assert_int_equal(watch(&l, true, true, 500), 0);
    /* No WATCHDOG_USEC: no watchdog. */
    unsetenv("WATCHDOG_USEC");
    assert_true(pd_notify_init());
    assert_int_equal(pd_notify_watchdog_usec(), 0);
    struct event_base *b = event_base_new();
    assert_null(pd_watchdog_new(b, 1));
    event_base_free(b);
    listener_close(&l);
    /* No NOTIFY_SOCKET, or one we cannot use: nothing is sent. */
    assert_false(pd_notify_init());
    assert_int_equal(pd_notify("READY=1"), -1);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_false(pd_notify_init());
    setenv("NOTIFY_SOCKET", "@", 1);
    assert_false(pd_notify_init());
    unsetenv("NOTIFY_SOCKET");
}

/* ---- logs ------------------------------------------------------------ */

/* Runs pd_log with stderr moved to a file; returns the file's text. */
typedef struct captured {
    int saved, fd;
    char path[64];
} captured;

static void capture_start(captured *c, bool journal) {
    snprintf(c->path, sizeof(c->path), "/tmp/porteiro-log-XXXXXX");
    c->fd = mkstemp(c->path);
    assert_true(c->fd >= 0);
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    assert_int_equal(dup2(c->fd, STDERR_FILENO), STDERR_FILENO);
    struct stat st;
    assert_int_equal(fstat(c->fd, &st), 0);
    char env[64];
    /* journal: stderr's own device and inode; else another file's. */
    snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino + (journal ? 0 : 1));
    setenv("JOURNAL_STREAM", env, 1);
    assert_int_equal(pd_log_init(), journal);
}

static void capture_end(captured *c, char *out, size_t len) {
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    ssize_t n = pread(c->fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(c->fd);
    unlink(c->path);
    unsetenv("JOURNAL_STREAM");
    pd_log_init();
    pd_log_set_format(PD_LOG_TEXT);
}

static void log_formats(void **state) {
    (void)state;
    char out[8192], want[128];
    captured c;

    /* The journal: priority prefixes, no time, no pid. */
    capture_start(&c, true);
    pd_log(PD_LOG_ERROR, "e %d", 1);
    pd_log(PD_LOG_WARN, "w");
    pd_log(PD_LOG_INFO, "i");
    pd_log(PD_LOG_DEBUG, "dropped at the default level");
    capture_end(&c, out, sizeof(out));
    assert_string_equal(out, "<3>error: e 1\n<4>warn: w\n<6>info: i\n");

    /* Not the journal (another inode): the time and pid, no prefix. */
    capture_start(&c, false);
    pd_log(PD_LOG_WARN, "plain");
    capture_end(&c, out, sizeof(out));
    /* "2026-12-04T15:00:00" then "Z porteirod[PID] warn: plain" */
    snprintf(want, sizeof(want), "Z porteirod[%d] warn: plain\n", (int)getpid());
    assert_int_equal(out[4], '-');
    assert_non_null(strstr(out, want));
    assert_int_equal(strlen(out), 19 + strlen(want));

    /* json: one object a line, the message escaped; behind the journal's prefix. */
    capture_start(&c, true);
    assert_int_equal(pd_log_parse_format("json"), PD_LOG_JSON);
    assert_int_equal(pd_log_parse_format("xml"), -1);
    pd_log_set_format(PD_LOG_JSON);
    pd_log(PD_LOG_ERROR, "a \"quoted\" \\ line\nand\ta bell\a");
    capture_end(&c, out, sizeof(out));
    snprintf(want, sizeof(want), "\",\"level\":\"error\",\"pid\":%d,\"msg\":", (int)getpid());
    assert_memory_equal(out, "<3>{\"time\":\"", 12);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\"msg\":\"a \\\"quoted\\\" \\\\ line\\nand\\ta bell\\u0007\"}\n"));

    /* A message longer than a line is cut, and the line still ends. */
    capture_start(&c, false);
    pd_log_set_format(PD_LOG_JSON);
    char big[3000];
    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    pd_log(PD_LOG_INFO, "%s", big);
    capture_end(&c, out, sizeof(out));
    size_t n = strlen(out);
    assert_true(n > 1000 && n <= 2048);
    assert_memory_equal(out + n - 3, "\"}\n", 3);
}

/* True once the daemon's log holds text (within 5 s): it accepts
 * connections a moment before its "listening" line is written. */
static bool log_shows(const test_daemon *d, const char *text) {
    for (int i = 0; i < 500; i++) {
        if (test_daemon_log_contains(d, text))
            return true;
        test_sleep_ms(10);
    }
    return false;
}

/* The daemon with --log-format json, and --version. */
static void daemon_json_log_and_version(void **state) {
    (void)state;
    test_daemon d;
    const char *args[] = {"--log-format", "json", NULL};
    test_daemon_must_start(&d, CONFIG, args);
    assert_true(log_shows(&d, "\"msg\":\"listening on 127.0.0.1:"));
    assert_true(test_daemon_log_contains(&d, "{\"time\":\""));
    assert_true(test_daemon_log_contains(&d, "\"level\":\"info\""));
    test_daemon_must_finish(&d);

    char out[512];
    const char *bin = getenv("PORTEIROD");
    const char *version[] = {bin, "--version", NULL};
    assert_int_equal(test_run(version, out, sizeof(out)), 0);
    const char *want = "porteirod " PORTEIRO_VERSION " (commit ";
    assert_memory_equal(out, want, strlen(want));
    const char *bad[] = {bin, "--config", "x.yaml", "--log-format", "xml", NULL};
    assert_int_equal(test_run(bad, out, sizeof(out)), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(notify_lifecycle),
        cmocka_unit_test(notify_abstract_socket),
        cmocka_unit_test(watchdog_needs_every_loop),
        cmocka_unit_test(log_formats),
        cmocka_unit_test(daemon_json_log_and_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
