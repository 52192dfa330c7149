/* demo.c — a short live demo of porteiro's decisions, and the smallest
 * complete use of the C API. Runs on the memory backend, or against Redis
 * when PORTEIRO_REDIS is set (e.g. redis://127.0.0.1:6379).
 *
 * A client sends 15 requests in a burst, then one every 100 ms, against
 * "5 per second, burst 10" AND "20 per minute"; each line is one decision. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "porteiro.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    porteiro_limit limits[2];
    size_t nlimits;
    char err[256];

    if (porteiro_parse_limits("token_bucket 5/1s burst 10, fixed_window 20/1m", limits, 2, &nlimits,
                              err, sizeof(err)) != PORTEIRO_OK) {
        fprintf(stderr, "demo: %s\n", err);
        return 2;
    }
    porteiro_options opts;
    porteiro_options_init(&opts);
    opts.redis_url = getenv("PORTEIRO_REDIS");
    opts.prefix = "porteiro-demo";
    opts.on_error = PORTEIRO_ON_ERROR_ERROR; /* a demo should show failures */
    porteiro_status st;
    porteiro_t *p = porteiro_new(&opts, &st, err, sizeof(err));
    if (p == NULL) {
        fprintf(stderr, "demo: %s: %s\n", porteiro_strerror(st), err);
        return 3;
    }
    char key[64];
    snprintf(key, sizeof(key), "demo-client-%ld", (long)time(NULL));
    printf("backend: %s\npolicy: token_bucket 5/1s burst 10, fixed_window 20/1m\nkey: %s\n\n",
           opts.redis_url ? opts.redis_url : "memory", key);
    porteiro_request req = {.limits = limits,
                            .nlimits = nlimits,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    for (int i = 1; i <= 30; i++) {
        porteiro_decision d;
        st = porteiro_check_request(p, &req, &d);
        if (st != PORTEIRO_OK) {
            fprintf(stderr, "demo: %s: %s\n", porteiro_strerror(st), porteiro_errmsg(p));
            porteiro_free(p);
            return 3;
        }
        printf("request %2d: %-7s remaining %2lld  reset %5lld ms  retry after %4lld ms%s\n", i,
               d.allowed ? "allowed" : "DENIED", (long long)d.remaining, (long long)d.reset_ms,
               (long long)d.retry_after_ms,
               d.denied_by >= 0 ? (d.denied_by == 0 ? "  (5/s burst 10)" : "  (20/min)") : "");
        if (i > 15)
            sleep_ms(100);
    }
    porteiro_free(p);
    return 0;
}
