/* fuzz_request.c — libFuzzer target over porteirod's request handling: the
 * routing, the JSON body, the query, headers and X-Forwarded-For, on the
 * memory backend (decisions complete inline). The input is
 *   byte 0: method (GET, HEAD, POST, other)
 *   then "target\n" "Name: value\n"... "\n" body
 * Every request must get exactly one answer with a sane status.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_request
 *   build-fuzz/fuzz_request -max_total_time=60 fuzz/corpus/request */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "fuzz_app.h"
#include "ops/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config[] =
    "trusted_proxies:\n  - 127.0.0.1/32\n  - 10.0.0.0/8\n  - ::1/128\n"
    "policies:\n"
    "  api:\n    limits:\n      - token_bucket 5/1s burst 10\n    key: header X-Api-Key\n"
    "  ip:\n    limits:\n      - gcra 3/1s\n      - fixed_window 100/1h\n"
    "  deny:\n    limits:\n      - fixed_window 1/1h\n    key: header K\n    deny_status: 401\n"
    "  plan:\n    key: header X-Api-Key\n    tier: header X-Plan\n    default_tier: free\n"
    "    tiers:\n      free: [fixed_window 2/1h]\n      pro: 'gcra 9/1s burst 20, fixed_window 99/1h'\n"
    "    overrides:\n      vip: fixed_window 100/1h\n";

static pd_app *app;
static porteiro_t *limiter;
static int answers;

static void init(void) {
    app = fuzz_app_new(config, sizeof(config) - 1, &limiter);
}

static void on_done(pd_response *resp, void *arg) {
    (void)arg;
    answers++;
    if (resp->status < 200 || resp->status > 599)
        abort();
}

/* Cuts the next line (up to '\n') out of the input as a C string. */
static char *next_line(const uint8_t **p, const uint8_t *end) {
    const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = nl != NULL ? (size_t)(nl - *p) : (size_t)(end - *p);
    char *s = malloc(n + 1);
    memcpy(s, *p, n);
    s[n] = '\0';
    *p += nl != NULL ? n + 1 : n;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (app == NULL)
        init();
    if (size == 0)
        return 0;
    static const pd_method methods[] = {PD_GET, PD_HEAD, PD_POST, PD_OTHER};
    const uint8_t *p = data + 1, *end = data + size;
    char *target = next_line(&p, end);
    char *lines[PD_MAX_REQUEST_HEADERS + 8];
    pd_header headers[PD_MAX_REQUEST_HEADERS + 8];
    size_t n = 0;
    while (p < end && *p != '\n' && n < PD_MAX_REQUEST_HEADERS + 8) {
        lines[n] = next_line(&p, end);
        char *colon = strchr(lines[n], ':');
        headers[n].name = lines[n];
        headers[n].value = colon != NULL ? colon + 1 : "";
        if (colon != NULL)
            *colon = '\0';
        n++;
    }
    if (p < end)
        p++; /* the empty line */
    char *query = strchr(target, '?');
    if (query != NULL)
        *query++ = '\0';
    pd_request req = {
        .method = methods[data[0] % 4],
        .path = target,
        .query = query,
        .headers = headers,
        .nheaders = n,
        .peer = data[0] & 0x10 ? "127.0.0.1" : "2001:db8::1",
        .body = (const char *)p,
        .body_len = (size_t)(end - p),
    };
    int before = answers;
    pd_app_handle(app, &req, on_done, NULL);
    if (answers != before + 1) /* memory backend: answered inline, once */
        abort();
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(target);
    return 0;
}
