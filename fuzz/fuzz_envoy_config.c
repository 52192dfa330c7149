/* fuzz_envoy_config.c — libFuzzer target over envoy ratelimit's config as
 * porteirod reads it (daemon/rules): the loader, then the matcher and the
 * counter key. The input is a YAML file, then a line "%%", then request
 * descriptors, one per line, as "key=value,key=value". A config that loads
 * must match every descriptor without fault, and a match must reach a
 * rule with a limit whose path starts with the domain.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_envoy_config
 *   build-fuzz/fuzz_envoy_config -max_total_time=60 fuzz/corpus/envoy */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules/envoy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ENTRIES PE_MAX_DEPTH

/* Matches one "k=v,k=v" line against every domain. */
static void match_line(const pe_config *cfg, const char *line, size_t len) {
    pe_entry e[MAX_ENTRIES];
    size_t n = 0;
    const char *p = line, *end = line + len;
    while (p < end && n < MAX_ENTRIES) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (eq == NULL)
            eq = stop;
        e[n++] = (pe_entry){p, (size_t)(eq - p), eq < stop ? eq + 1 : eq,
                            eq < stop ? (size_t)(stop - eq - 1) : 0};
        p = stop + 1;
    }
    for (size_t d = 0; d < cfg->ndomains; d++) {
        const pe_rule *path[MAX_ENTRIES];
        const pe_rule *r = pe_match(&cfg->domains[d], e, n, path);
        if (r == NULL)
            continue;
        if (!r->has_limit ||
            strncmp(r->path, cfg->domains[d].name, strlen(cfg->domains[d].name)) != 0)
            abort();
        char key[512];
        size_t k = pe_counter_key(e, n, path, key, sizeof(key));
        if (k > sizeof(key))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *sep = NULL;
    for (size_t i = 0; i + 3 <= size; i++)
        if (memcmp(text + i, "%%\n", 3) == 0 && (i == 0 || text[i - 1] == '\n')) {
            sep = text + i;
            break;
        }
    size_t ylen = sep != NULL ? (size_t)(sep - text) : size;
    char err[512];
    pe_config *cfg = pe_config_new();
    if (cfg == NULL)
        return 0;
    if (pe_config_add_text(cfg, text, ylen, "fuzz.yaml", err, sizeof(err)) != 0) {
        if (strncmp(err, "fuzz.yaml:", 10) != 0)
            abort(); /* every error names the file and line */
    } else if (sep != NULL) {
        const char *p = sep + 3, *end = text + size;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *stop = nl != NULL ? nl : end;
            match_line(cfg, p, (size_t)(stop - p));
            p = stop + 1;
        }
    }
    pe_config_free(cfg);
    return 0;
}
