/* fuzz_config.c — libFuzzer target over every text a user configures: the
 * library's YAML file, porteirod's YAML file (its settings on top), Redis
 * URLs (redis://, unix://, the cluster and sentinel forms), compact limits
 * and durations. The input is
 *   byte 0: which parser (below)
 *   then the text.
 * Each must answer (a value or an error with a message), never crash, leak
 * or read past the text; a value it accepts must be in its range.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_config
 *   build-fuzz/fuzz_config -max_total_time=60 fuzz/corpus/config */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "porteiro_config.h"
#include "redis/url.h"
#include "ops/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { P_CONFIG, P_SETTINGS, P_URL, P_LIMITS, P_DURATION, P_COUNT };

static void check_message(const char *err, size_t len) {
    if (memchr(err, '\0', len) == NULL || err[0] == '\0')
        abort(); /* an error always says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t which = data[0] % P_COUNT;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[512];
    err[0] = '\0';
    if (which == P_CONFIG) {
        porteiro_config *cfg = porteiro_config_parse(text, len, "fuzz.yaml", err, sizeof(err));
        if (cfg == NULL)
            check_message(err, sizeof(err));
        porteiro_config_free(cfg);
        return 0;
    }
    if (which == P_SETTINGS) {
        pd_settings *s = pd_settings_parse(text, len, "fuzz.yaml", err, sizeof(err));
        if (s == NULL)
            check_message(err, sizeof(err));
        else
            pd_settings_unref(s);
        return 0;
    }
    /* The rest take a NUL-terminated string. */
    char *z = malloc(len + 1);
    if (z == NULL)
        return 0;
    memcpy(z, text, len);
    z[len] = '\0';
    if (which == P_URL) {
        pt_redis_url url;
        if (pt_redis_url_parse(z, &url, err, sizeof(err)) == 0) {
            if (url.db < 0 || url.nnodes > PT_URL_MAX_NODES)
                abort();
            if (url.kind == PT_URL_SINGLE && !url.is_unix && (url.port <= 0 || url.port > 65535))
                abort();
            for (size_t i = 0; url.kind != PT_URL_SINGLE && i < url.nnodes; i++)
                if (url.nodes[i].port <= 0 || url.nodes[i].port > 65535)
                    abort();
        } else {
            check_message(err, sizeof(err));
        }
    } else if (which == P_LIMITS) {
        porteiro_limit limits[PORTEIRO_MAX_LIMITS];
        size_t n = 0;
        if (porteiro_parse_limits(z, limits, PORTEIRO_MAX_LIMITS, &n, err, sizeof(err)) ==
            PORTEIRO_OK) {
            if (n < 1 || n > PORTEIRO_MAX_LIMITS)
                abort();
            for (size_t i = 0; i < n; i++)
                if (porteiro_limit_validate(&limits[i], err, sizeof(err)) != PORTEIRO_OK)
                    abort(); /* parsed means valid */
        } else {
            check_message(err, sizeof(err));
        }
    } else {
        int64_t ms = 0;
        if (porteiro_parse_duration(z, &ms) == PORTEIRO_OK &&
            (ms <= 0 || ms > PORTEIRO_MAX_PERIOD_MS * 1000))
            abort();
    }
    free(z);
    return 0;
}
