/* test_nginx_requests.c — a request's life in ngx_http_porteiro_module,
 * against Debian's nginx and real redis-servers (docs/nginx.md, "How it
 * runs"): nginx's own build of the module (nginx/config); clients that
 * leave before or while their check is in flight or while held by
 * porteiro_delay (noticed as limit_req notices them, their units given
 * back); error_page after a rejection; porteiro_on_error local without a
 * handle; the preaccess order (limit_req and limit_conn first); fast
 * shutdown and post_action with checks in flight; quota leases with four
 * workers and with Redis frozen. nginx and the module:
 * tests/support/nginx_harness.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include "http_client.h"
#include "nginx_harness.h"
#include "porteiro.h"
#include "redis_server.h"

/* The units spent of `limit` (compact form) for key on the Redis at url:
 * L - remaining, read with a peek (nothing written). */
static int64_t spent(const char *url, const char *limit, const char *key) {
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
    assert_int_equal(porteiro_peek(p, &l, key, &d), PORTEIRO_OK);
    porteiro_free(p);
    return d.limit - d.remaining;
}

/* nginx/config, built as nginx builds a third-party module: the Makefile
 * of `./configure --add-dynamic-module=nginx/` (the one CMake ran on
 * nginx-dev's tree), `make modules`, linked with this build's
 * libporteiro.so; nginx loads what it made and decides on Redis. */
static void addon_build_of_nginx_config(void **state) {
    (void)state;
    const char *objs = getenv("PORTEIRO_NGX_BUILD"), *libdir = getenv("PORTEIRO_LIB_DIR");
    if (objs == NULL || libdir == NULL)
        fail_msg("PORTEIRO_NGX_BUILD / PORTEIRO_LIB_DIR unset: nginx-dev's configure did not run");
    char cmd[2048], so[600], log[600];
    snprintf(so, sizeof(so), "%s/ngx_http_porteiro_module.so", objs);
    snprintf(log, sizeof(log), "%s/addon-make.log", objs);
    unlink(so);
    snprintf(cmd, sizeof(cmd),
             "cd /usr/share/nginx/src && LIBRARY_PATH=%s make -f %s/Makefile modules >%s 2>&1",
             libdir, objs, log);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof(cmd), "tail -20 %s", log);
        (void)system(cmd);
        fail_msg("make modules failed (%s)", log);
    }
    assert_int_equal(access(so, R_OK), 0);

    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    const char *cmake_module = module_path;
    module_path = so;
    setenv("LD_LIBRARY_PATH", libdir, 1); /* its libporteiro.so.1 */
    ngx n = {0};
    ngx_start_on(&n, r.url, 1,
                 "    add_header X-Status $porteiro_status always;\n"
                 "    location / { porteiro_limit $http_x_key \"fixed_window 2/1h\"; }\n");
    unsetenv("LD_LIBRARY_PATH");
    module_path = cmake_module;
    http_response resp;
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 200);
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 429);
    assert_string_equal(header(&resp, "X-Status"), "REJECTED");
    assert_int_equal(spent(r.url, "fixed_window 2/1h", "addon"), 2); /* decided by Redis */
    ngx_stop(&n);
    test_redis_stop(&r);
}

int main(void) {
    int rc = ngx_harness_init();
    if (rc != 0)
        return rc;
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addon_build_of_nginx_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
