/* test_cli_progress.c — `porteiro bench` on a terminal: with stderr on a
 * pseudo-terminal it draws a progress line there (checks done of the total,
 * the rate, the time left) and erases it at the end, for both engines;
 * stdout holds the same single JSON line as without a terminal; with stderr
 * on a pipe nothing is drawn at all. */
#define _XOPEN_SOURCE 700 /* posix_openpt, grantpt, unlockpt, ptsname */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"

typedef struct run {
    int code;
    char out[4096];  /* stdout: a pipe */
    char err[65536]; /* stderr: the terminal, or a pipe */
    size_t out_len, err_len;
} run;

/* porteiro bench ARGS with stdout on a pipe and stderr on a terminal (tty)
 * or a pipe. */
static void bench(run *r, bool tty, const char *const *args) {
    const char *cli = getenv("PORTEIRO_CLI");
    assert_non_null(cli);
    memset(r, 0, sizeof(*r));
    int out[2], err[2] = {-1, -1}, master = -1;
    assert_int_equal(pipe(out), 0);
    const char *slave = NULL;
    if (tty) {
        master = posix_openpt(O_RDWR | O_NOCTTY);
        assert_true(master >= 0);
        assert_int_equal(grantpt(master), 0);
        assert_int_equal(unlockpt(master), 0);
        slave = ptsname(master);
        assert_non_null(slave);
    } else {
        assert_int_equal(pipe(err), 0);
    }
    const char *argv[32] = {cli, "bench"};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int e = tty ? open(slave, O_RDWR | O_NOCTTY) : err[1];
        dup2(out[1], STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    int err_fd = tty ? master : err[0];
    if (!tty)
        close(err[1]);
    /* stderr first: the child blocks on neither (stdout is one short line). */
    test_read_all(err_fd, r->err, sizeof(r->err), &r->err_len);
    test_read_all(out[0], r->out, sizeof(r->out), &r->out_len);
    close(out[0]);
    close(err_fd);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* One JSON object with every field, one line, nothing of the terminal's. */
static void assert_json_only(const run *r, const char *requests) {
    if (r->code != 0)
        print_error("exit %d, stdout [%s], stderr [%s]\n", r->code, r->out, r->err);
    assert_int_equal(r->code, 0);
    assert_memory_equal(r->out, "{\"ops_per_sec\":", 15);
    assert_non_null(strstr(r->out, "\"p50_us\":"));
    assert_non_null(strstr(r->out, "\"errors\":0}"));
    char allowed[64];
    snprintf(allowed, sizeof(allowed), "\"allowed\":%s,", requests);
    assert_non_null(strstr(r->out, allowed));
    assert_int_equal(strchr(r->out, '\n') - r->out, (long)r->out_len - 1);
    assert_null(strchr(r->out, '\r'));
    assert_null(strchr(r->out, '\033'));
}

static void progress_on_a_terminal_only(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    run r;
    for (int batch = 0; batch < 2; batch++) { /* the loop engine, then threads */
        const char *args[] = {"--redis",
                              redis.url,
                              "--connections",
                              "2",
                              "--requests",
                              "3000",
                              batch ? "--batch" : "--pipeline",
                              "4",
                              NULL};
        bench(&r, true, args);
        assert_json_only(&r, "3000");
        /* The first line at once (0 done), then redraws; the last one erased. */
        assert_non_null(strstr(r.err, "\rporteiro bench: 0/3000 checks, 0/s, ? left\033[K"));
        assert_true(r.err_len >= 4);
        assert_string_equal(r.err + r.err_len - 4, "\r\033[K");
        assert_null(strchr(r.err, '{'));

        bench(&r, false, args);
        assert_json_only(&r, "3000");
        assert_int_equal(r.err_len, 0); /* a pipe: not a character */
    }
    test_redis_stop(&redis);
}

/* A run long enough to redraw: the counts grow and name the total. */
static void progress_counts_up(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    /* One connection, one check in flight: a round trip each, so that a
     * redraw interval (200 ms) passes well before the end. */
    const char *args[] = {"--redis", redis.url, "--connections", "1", "--requests", "20000", NULL};
    run r;
    bench(&r, true, args);
    assert_json_only(&r, "20000");
    long last = -1;
    int lines = 0;
    for (const char *p = r.err; (p = strstr(p, "\rporteiro bench: ")) != NULL; p++) {
        long done, total;
        assert_int_equal(sscanf(p, "\rporteiro bench: %ld/%ld checks", &done, &total), 2);
        assert_int_equal(total, 20000);
        assert_true(done >= last && done <= total);
        assert_non_null(strstr(p, "/s, "));
        last = done;
        lines++;
    }
    if (lines < 2)
        fail_msg("one progress line only in a run of 20000 checks: [%s]", r.err);
    test_redis_stop(&redis);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(progress_on_a_terminal_only),
        cmocka_unit_test(progress_counts_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
