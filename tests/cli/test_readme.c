/* test_readme.c — the first try: the command-line examples of README.md,
 * read from the README itself (so this test breaks when it drifts) and run
 * through /bin/sh as written, once on a machine without Redis and once with
 * one. Only the Redis address is rewritten (the README's 127.0.0.1:6379
 * becomes a port this test owns: a free one with nothing listening, or its
 * own redis-server), in the command and in a copy of the config file it
 * names (and bench does 2000 checks, not 100000).
 *
 * Without Redis every answer must be one a newcomer understands: allowed
 * (exit 0), or exit 3 with one line naming the Redis and what to do, and a
 * fallback decision always explained by one line on stderr. The README's
 * `--config ... --policy api --cost 3` example passes (decided locally). With
 * Redis every example exits 0 and says nothing on stderr. An output line
 * the README prints under a command must be exactly what it prints. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"

#define MAX_EXAMPLES 32
#define LINE_MAX_LEN 1024

typedef struct example {
    char command[LINE_MAX_LEN];
    char output[LINE_MAX_LEN]; /* the README's line under it, "" if none */
} example;

static example examples[MAX_EXAMPLES];
static size_t nexamples;
static char tmpdir[256];
static const char *srcdir;

/* The ```sh block of "### The command-line tool": its "porteiro ..." lines,
 * each with the JSON line printed under it, if any. */
static void read_readme(void) {
    char path[512];
    snprintf(path, sizeof(path), "%s/README.md", srcdir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[LINE_MAX_LEN];
    enum { BEFORE, SECTION, BLOCK, DONE } where = BEFORE;
    while (where != DONE && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (where == BEFORE && strcmp(line, "### The command-line tool") == 0)
            where = SECTION;
        else if (where == SECTION && strcmp(line, "```sh") == 0)
            where = BLOCK;
        else if (where == BLOCK && strcmp(line, "```") == 0)
            where = DONE;
        else if (where == BLOCK && strncmp(line, "porteiro ", 9) == 0 && nexamples < MAX_EXAMPLES)
            snprintf(examples[nexamples++].command, LINE_MAX_LEN, "%s", line);
        else if (where == BLOCK && line[0] == '{' && nexamples > 0)
            snprintf(examples[nexamples - 1].output, LINE_MAX_LEN, "%s", line);
    }
    fclose(f);
    assert_int_equal(where, DONE);
    assert_true(nexamples >= 5);
}

/* s with every "redis://127.0.0.1" (and a ":6379" after it) replaced by url,
 * "examples/porteiro.yaml" by config, and bench's "--requests 100000" by
 * 2000 (the same command, in a time a sanitizer build on a loaded machine
 * can afford). */
static void rewrite(const char *s, const char *url, const char *config, char *out, size_t outlen) {
    static const char host[] = "redis://127.0.0.1", file[] = "examples/porteiro.yaml",
                      requests[] = "--requests ";
    size_t n = 0;
    while (*s != '\0' && n + 1 < outlen) {
        if (strncmp(s, host, sizeof(host) - 1) == 0) {
            s += sizeof(host) - 1;
            if (strncmp(s, ":6379", 5) == 0)
                s += 5;
            n += (size_t)snprintf(out + n, outlen - n, "%s", url);
        } else if (strncmp(s, requests, sizeof(requests) - 1) == 0) {
            s += sizeof(requests) - 1;
            while (*s >= '0' && *s <= '9')
                s++;
            n += (size_t)snprintf(out + n, outlen - n, "%s2000", requests);
        } else if (config != NULL && strncmp(s, file, sizeof(file) - 1) == 0) {
            s += sizeof(file) - 1;
            n += (size_t)snprintf(out + n, outlen - n, "%s", config);
        } else {
            out[n++] = *s++;
        }
        if (n >= outlen)
            n = outlen - 1;
    }
    out[n] = '\0';
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* examples/porteiro.yaml with its Redis address pointed at url. */
static void copy_config(const char *url, char *out, size_t outlen) {
    char path[512];
    snprintf(path, sizeof(path), "%s/examples/porteiro.yaml", srcdir);
    char *text = slurp(path);
    snprintf(out, outlen, "%s/porteiro.yaml", tmpdir);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char fixed[LINE_MAX_LEN];
        rewrite(line, url, NULL, fixed, sizeof(fixed));
        fprintf(f, "%s\n", fixed);
    }
    fclose(f);
    free(text);
}

typedef struct ran {
    int code;
    char *out, *err;
} ran;

/* Runs one README line with /bin/sh in the source folder, `porteiro` on PATH. */
static void run_line(const char *line, const char *env_redis, ran *r) {
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof(out_path), "%s/out", tmpdir);
    snprintf(err_path, sizeof(err_path), "%s/err", tmpdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || chdir(srcdir) != 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        char path[1024];
        snprintf(path, sizeof(path), "%s:/usr/bin:/bin", tmpdir);
        setenv("PATH", path, 1);
        if (env_redis != NULL)
            setenv("PORTEIRO_REDIS", env_redis, 1);
        else
            unsetenv("PORTEIRO_REDIS");
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = slurp(out_path);
    r->err = slurp(err_path);
    if (strlen(r->out) > 0 && r->out[strlen(r->out) - 1] == '\n')
        r->out[strlen(r->out) - 1] = '\0';
}

static size_t count_lines(const char *s) {
    size_t n = 0;
    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

static void show(const char *line, const ran *r) {
    print_error("$ %s\nexit %d\nstdout [%s]\nstderr [%s]\n", line, r->code, r->out, r->err);
}

static int setup(void **state) {
    (void)state;
    srcdir = getenv("PORTEIRO_SOURCE_DIR");
    const char *cli = getenv("PORTEIRO_CLI");
    if (srcdir == NULL || cli == NULL)
        return -1;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/porteiro-readme-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    char link[512];
    snprintf(link, sizeof(link), "%s/porteiro", tmpdir);
    return symlink(cli, link);
}

static int teardown(void **state) {
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void examples_without_redis(void **state) {
    (void)state;
    read_readme();
    char url[64], config[512], where[96];
    int port = test_free_port(); /* nothing listens there */
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    snprintf(where, sizeof(where), "no answer from Redis at 127.0.0.1:%d (", port);
    copy_config(url, config, sizeof(config));
    bool first_try_passed = false;
    for (size_t i = 0; i < nexamples; i++) {
        char line[2 * LINE_MAX_LEN];
        rewrite(examples[i].command, url, config, line, sizeof(line));
        ran r;
        run_line(line, NULL, &r);
        bool ok = r.code == 0 || r.code == 3;
        if (r.code == 3) /* nothing decided: one line, naming the Redis */
            ok = ok && r.out[0] == '\0' && count_lines(r.err) == 1 && strstr(r.err, where);
        else if (strstr(r.out, "\"fallback\":") != NULL) /* decided anyway: one line says how */
            ok = ok && count_lines(r.err) == 1 && strstr(r.err, ": fallback: Redis at ") &&
                 strstr(r.err, "can never pass") == NULL;
        else
            ok = ok && r.err[0] == '\0';
        if (examples[i].output[0] != '\0')
            ok = ok && strcmp(r.out, examples[i].output) == 0;
        if (strstr(line, "--policy api --cost 3") != NULL) {
            ok = ok && r.code == 0 && strstr(r.out, "\"fallback\":\"local\"") &&
                 strstr(r.err, "allowed locally");
            first_try_passed = ok;
        }
        if (!ok)
            show(line, &r);
        assert_true(ok);
        free(r.out);
        free(r.err);
    }
    assert_true(first_try_passed);
}

static void examples_with_redis(void **state) {
    (void)state;
    read_readme();
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char config[512];
    copy_config(redis.url, config, sizeof(config));
    for (size_t i = 0; i < nexamples; i++) {
        char line[2 * LINE_MAX_LEN];
        rewrite(examples[i].command, redis.url, config, line, sizeof(line));
        ran r;
        run_line(line, redis.url, &r); /* $PORTEIRO_REDIS: every example on Redis */
        bool ok = r.code == 0 && r.err[0] == '\0' && strstr(r.out, "fallback") == NULL;
        if (examples[i].output[0] != '\0')
            ok = ok && strcmp(r.out, examples[i].output) == 0;
        if (!ok)
            show(line, &r);
        free(r.out);
        free(r.err);
        if (!ok)
            test_redis_stop(&redis);
        assert_true(ok);
    }
    test_redis_stop(&redis);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(examples_without_redis),
        cmocka_unit_test(examples_with_redis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
