/* json.c — decisions as JSON objects. */
#include "json.h"

static const char *fallback_name(porteiro_fallback f) {
    switch (f) {
        case PORTEIRO_FALLBACK_OPEN: return "open";
        case PORTEIRO_FALLBACK_CLOSED: return "closed";
        case PORTEIRO_FALLBACK_LOCAL: return "local";
        default: return NULL;
    }
}

void cli_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c); /* control bytes; others pass as UTF-8 */
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

/* The five fields every decision and every limit has, without braces. */
static void result_fields(FILE *out, bool allowed, int64_t limit, int64_t remaining,
                          int64_t reset_ms, int64_t retry_after_ms) {
    fprintf(out,
            "\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,\"reset_ms\":%lld,"
            "\"retry_after_ms\":%lld",
            allowed ? "true" : "false", (long long)limit, (long long)remaining, (long long)reset_ms,
            (long long)retry_after_ms);
}

/* ,"fallback":..,"reason":.. when Redis did not decide. */
static void fallback_fields(FILE *out, const porteiro_decision *d) {
    const char *fb = fallback_name(d->fallback);
    if (fb != NULL) {
        fprintf(out, ",\"fallback\":\"%s\",\"reason\":", fb);
        cli_json_string(out, porteiro_strerror(d->fallback_reason));
    }
}

void cli_json_decision(FILE *out, const porteiro_decision *d, bool with_limits, bool shadow,
                       bool with_wait) {
    fputc('{', out);
    result_fields(out, d->allowed, d->limit, d->remaining, d->reset_ms, d->retry_after_ms);
    /* --max-wait: the ms to wait before going on (0: at once). */
    if (with_wait)
        fprintf(out, ",\"wait_ms\":%lld", (long long)d->wait_ms);
    if (with_limits) {
        fputs(",\"limits\":[", out);
        for (size_t i = 0; i < d->nlimits; i++) {
            const porteiro_result *r = &d->limits[i];
            fputs(i > 0 ? ",{" : "{", out);
            result_fields(out, r->allowed, r->limit, r->remaining, r->reset_ms, r->retry_after_ms);
            if (with_wait)
                fprintf(out, ",\"wait_ms\":%lld", (long long)r->wait_ms);
            fputc('}', out);
        }
        fprintf(out, "],\"denied_by\":%d", d->denied_by);
    }
    if (shadow)
        fprintf(out, ",\"shadow\":true,\"would_deny\":%s", d->shadow_denied ? "true" : "false");
    fallback_fields(out, d);
    fputs("}\n", out);
}

void cli_json_lease(FILE *out, const porteiro_decision *d, const char *lease) {
    fputc('{', out);
    result_fields(out, d->allowed, d->limit, d->remaining, d->reset_ms, d->retry_after_ms);
    fputs(",\"lease\":", out);
    if (lease != NULL && lease[0] != '\0')
        cli_json_string(out, lease);
    else
        fputs("null", out);
    fallback_fields(out, d);
    fputs("}\n", out);
}
