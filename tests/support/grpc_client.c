/* grpc_client.c — the Python gRPC client, run from C tests (grpc_client.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_client.h"
#include "http_client.h"

#define OUTPUT_MAX (4 << 20)

json_t *grpc_calls(int port, const char *calls) {
    const char *src = getenv("PORTEIRO_SOURCE_DIR"), *desc = getenv("PORTEIRO_RLS_DESC");
    assert_non_null(src);
    assert_non_null(desc);
    char script[] = "/tmp/porteiro-grpc-XXXXXX";
    int fd = mkstemp(script);
    assert_true(fd >= 0);
    size_t n = strlen(calls);
    assert_int_equal(write(fd, calls, n), (ssize_t)n);
    close(fd);
    char client[512], target[64];
    snprintf(client, sizeof(client), "%s/tests/grpc/rls_client.py", src);
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    /* Debian's grpcio and protobuf live with the system's Python. */
    const char *argv[] = {"/usr/bin/python3", client, target, desc, script, NULL};
    char *out = malloc(OUTPUT_MAX);
    assert_non_null(out);
    int rc = test_run(argv, out, OUTPUT_MAX);
    unlink(script);
    if (rc != 0)
        fprintf(stderr, "rls_client.py exited %d:\n%s\n", rc, out);
    assert_int_equal(rc, 0);
    json_t *answers = json_array();
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (line[0] != '{')
            continue; /* grpcio's own logging */
        json_error_t err;
        json_t *a = json_loads(line, 0, &err);
        if (a == NULL)
            fprintf(stderr, "not JSON: %s\n", line);
        assert_non_null(a);
        json_array_append_new(answers, a);
    }
    free(out);
    return answers;
}

const char *grpc_str(json_t *answer, const char *field) {
    const char *s = json_string_value(json_object_get(answer, field));
    return s != NULL ? s : "";
}

static json_t *status_at(json_t *answer, size_t i, size_t j) {
    return json_array_get(json_array_get(json_object_get(answer, "statuses"), i), j);
}

long long grpc_status_int(json_t *answer, size_t i, size_t j) {
    json_t *v = status_at(answer, i, j);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

const char *grpc_status_str(json_t *answer, size_t i, size_t j) {
    const char *s = json_string_value(status_at(answer, i, j));
    return s != NULL ? s : "";
}
