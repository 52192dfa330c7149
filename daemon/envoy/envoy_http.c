/* envoy_http.c — POST /json and GET /healthcheck (envoy_http.h): the
 * RateLimitRequest read from proto3 JSON with jansson into a
 * pd_rls_request, decided by pd_rls_should_rate_limit, and the response
 * written as proto3 JSON (fields at their default value left out). */
#include "envoy_http.h"

#include <event2/buffer.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy_rls.h"
#include "ops/json_io.h"

#define JSON_TYPE "application/json"
#define MAX_JSON_DESCRIPTORS 64 /* as the gRPC face: more is refused */
#define MAX_JSON_ENTRIES 16

static const char *const unit_names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                         "DAY",     "MONTH",  "YEAR",   "WEEK"};
static const char *const code_names[] = {"UNKNOWN", "OK", "OVER_LIMIT"};

/* The request as read (35 KiB at most): not zeroed as a whole, each
 * descriptor is when it is read. */
typedef struct parsed {
    json_t *root;
    pd_rls_request req;
    pd_rls_descriptor descriptors[MAX_JSON_DESCRIPTORS];
    pd_rls_entry entries[MAX_JSON_DESCRIPTORS][MAX_JSON_ENTRIES];
} parsed;

static int fail(char *err, size_t errlen, const char *fmt, const char *what) {
    snprintf(err, errlen, fmt, what);
    return -1;
}

/* proto3 JSON takes lowerCamelCase and the proto's own names. */
static bool is(const char *name, const char *camel, const char *snake) {
    return strcmp(name, camel) == 0 || strcmp(name, snake) == 0;
}

/* A uint32 / uint64 field: a JSON integer, or a decimal string. */
static int get_uint(json_t *v, uint64_t max, uint64_t *out) {
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        const char *s = json_string_value(v);
        *out = strtoull(s, &end, 10);
        if (s[0] < '0' || s[0] > '9' || *end != '\0')
            return -1;
    } else {
        return -1;
    }
    return *out <= max ? 0 : -1;
}

static int get_unit(json_t *v, pd_rls_unit *out) {
    uint64_t n;
    for (int u = 0; json_is_string(v) && u < 8; u++)
        if (strcmp(json_string_value(v), unit_names[u]) == 0)
            return *out = (pd_rls_unit)u, 0;
    if (json_is_integer(v) && get_uint(v, 7, &n) == 0)
        return *out = (pd_rls_unit)n, 0;
    return -1;
}

static int read_limit(json_t *v, pd_rls_descriptor *d, char *err, size_t errlen) {
    const char *name;
    json_t *f;
    uint64_t n;
    if (!json_is_object(v))
        return fail(err, errlen, "%s must be an object", "\"limit\"");
    d->has_limit = true;
    json_object_foreach(v, name, f) {
        if (is(name, "requestsPerUnit", "requests_per_unit")) {
            if (get_uint(f, UINT32_MAX, &n) != 0)
                return fail(err, errlen, "%s must be an integer from 0 to 4294967295",
                            "\"requestsPerUnit\"");
            d->limit_requests_per_unit = (uint32_t)n;
        } else if (strcmp(name, "unit") == 0) {
            if (get_unit(f, &d->limit_unit) != 0)
                return fail(err, errlen,
                            "%s must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR",
                            "\"unit\"");
        } else {
            return fail(err, errlen, "unknown field \"%s\" in a limit", name);
        }
    }
    return 0;
}

static int read_entries(json_t *v, pd_rls_descriptor *d, pd_rls_entry *out, char *err,
                        size_t errlen) {
    if (!json_is_array(v) || json_array_size(v) > MAX_JSON_ENTRIES)
        return fail(err, errlen, "%s must be an array of at most 16 entries", "\"entries\"");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i), *f;
        const char *name;
        if (!json_is_object(e))
            return fail(err, errlen, "%s must be an object", "an entry");
        out[i] = (pd_rls_entry){"", 0, "", 0};
        json_object_foreach(e, name, f) {
            if (!json_is_string(f) || (strcmp(name, "key") != 0 && strcmp(name, "value") != 0))
                return fail(err, errlen, "an entry has string fields key and value, not \"%s\"",
                            name);
            if (name[0] == 'k')
                out[i].key = json_string_value(f), out[i].key_len = json_string_length(f);
            else
                out[i].value = json_string_value(f), out[i].value_len = json_string_length(f);
        }
    }
    d->entries = out;
    d->nentries = json_array_size(v);
    return 0;
}

static int read_descriptor(json_t *v, parsed *p, size_t i, char *err, size_t errlen) {
    pd_rls_descriptor *d = &p->descriptors[i];
    const char *name;
    json_t *f;
    uint64_t n;
    *d = (pd_rls_descriptor){0};
    if (!json_is_object(v))
        return fail(err, errlen, "%s must be an object", "a descriptor");
    json_object_foreach(v, name, f) {
        int rc = 0;
        if (strcmp(name, "entries") == 0) {
            rc = read_entries(f, d, p->entries[i], err, errlen);
        } else if (strcmp(name, "limit") == 0) {
            rc = read_limit(f, d, err, errlen);
        } else if (is(name, "hitsAddend", "hits_addend")) {
            if (get_uint(f, UINT64_MAX, &n) != 0)
                return fail(err, errlen, "%s must be a non-negative integer", "\"hitsAddend\"");
            d->has_hits_addend = true;
            d->hits_addend = n;
        } else {
            return fail(err, errlen, "unknown field \"%s\" in a descriptor", name);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int read_request(parsed *p, char *err, size_t errlen) {
    const char *name;
    json_t *f;
    uint64_t n;
    if (!json_is_object(p->root))
        return fail(err, errlen, "%s must be a JSON object", "the body");
    json_object_foreach(p->root, name, f) {
        if (strcmp(name, "domain") == 0) {
            if (!json_is_string(f))
                return fail(err, errlen, "%s must be a string", "\"domain\"");
            p->req.domain = json_string_value(f);
            p->req.domain_len = json_string_length(f);
        } else if (strcmp(name, "descriptors") == 0) {
            if (!json_is_array(f) || json_array_size(f) > MAX_JSON_DESCRIPTORS)
                return fail(err, errlen, "%s must be an array of at most 64 descriptors",
                            "\"descriptors\"");
            for (size_t i = 0; i < json_array_size(f); i++)
                if (read_descriptor(json_array_get(f, i), p, i, err, errlen) != 0)
                    return -1;
            p->req.descriptors = p->descriptors;
            p->req.ndescriptors = json_array_size(f);
        } else if (is(name, "hitsAddend", "hits_addend")) {
            if (get_uint(f, UINT32_MAX, &n) != 0)
                return fail(err, errlen, "%s must be an integer from 0 to 4294967295",
                            "\"hitsAddend\"");
            p->req.hits_addend = (uint32_t)n;
        } else {
            return fail(err, errlen,
                        "unknown field \"%s\" (expected domain, descriptors, hitsAddend)", name);
        }
    }
    return 0;
}

/* ---- the answer in proto3 JSON ---- */

/* A Duration: seconds with 3 decimals when there are milliseconds. */
static void duration(struct evbuffer *out, int64_t ms) {
    if (ms % 1000 == 0)
        evbuffer_add_printf(out, "\"%llds\"", (long long)(ms / 1000));
    else
        evbuffer_add_printf(out, "\"%lld.%03llds\"", (long long)(ms / 1000),
                            (long long)(ms % 1000));
}

static void write_status(struct evbuffer *out, const pd_rls_status *s) {
    evbuffer_add_printf(out, "{\"code\":\"%s\"", code_names[s->code]);
    if (s->has_limit) {
        evbuffer_add_printf(out, ",\"currentLimit\":{");
        if (s->limit_name[0] != '\0') {
            evbuffer_add_printf(out, "\"name\":");
            pd_json_string(out, s->limit_name, strlen(s->limit_name));
            evbuffer_add_printf(out, ",");
        }
        evbuffer_add_printf(out, "\"requestsPerUnit\":%u,\"unit\":\"%s\"}", s->requests_per_unit,
                            unit_names[(unsigned)s->unit < 8 ? s->unit : 0]);
    }
    if (s->limit_remaining > 0)
        evbuffer_add_printf(out, ",\"limitRemaining\":%u", s->limit_remaining);
    if (s->duration_until_reset_ms >= 0) {
        evbuffer_add_printf(out, ",\"durationUntilReset\":");
        duration(out, s->duration_until_reset_ms);
    }
    evbuffer_add_printf(out, "}");
}

void pd_envoy_write_response(struct evbuffer *out, const pd_rls_response *r) {
    evbuffer_add_printf(out, "{\"overallCode\":\"%s\",\"statuses\":[", code_names[r->overall_code]);
    for (size_t i = 0; i < r->nstatuses; i++) {
        if (i > 0)
            evbuffer_add(out, ",", 1);
        write_status(out, &r->statuses[i]);
    }
    evbuffer_add_printf(out, "]");
    if (r->nheaders > 0) {
        evbuffer_add_printf(out, ",\"responseHeadersToAdd\":[");
        for (size_t i = 0; i < r->nheaders; i++) {
            evbuffer_add_printf(out, "%s{\"key\":", i > 0 ? "," : "");
            pd_json_string(out, r->headers[i].name, strlen(r->headers[i].name));
            evbuffer_add_printf(out, ",\"value\":");
            pd_json_string(out, r->headers[i].value, strlen(r->headers[i].value));
            evbuffer_add_printf(out, "}");
        }
        evbuffer_add_printf(out, "]");
    }
    evbuffer_add_printf(out, "}\n");
}

typedef struct http_call {
    pd_envoy_http_done *done;
    void *arg;
} http_call;

static void answer_buffer(http_call *c, int status, struct evbuffer *b) {
    size_t len = evbuffer_get_length(b);
    const char *text = (const char *)evbuffer_pullup(b, -1);
    c->done(status, JSON_TYPE, text != NULL ? text : "", len, c->arg);
    evbuffer_free(b);
}

static void answer_error(http_call *c, int status, const char *message) {
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        c->done(503, "text/plain", "", 0, c->arg);
        return;
    }
    pd_json_error(b, message);
    answer_buffer(c, status, b);
}

static int http_status_of(int grpc_status) {
    switch (grpc_status) {
        case PD_GRPC_INVALID_ARGUMENT: return 400;
        case PD_GRPC_UNAVAILABLE: return 503;
        case PD_GRPC_RESOURCE_EXHAUSTED: return 503;
        default: return 500;
    }
}

static void on_response(const pd_rls_response *r, void *arg) {
    http_call *c = arg;
    struct evbuffer *b = r->grpc_status == PD_GRPC_OK ? evbuffer_new() : NULL;
    if (r->grpc_status != PD_GRPC_OK || b == NULL) {
        answer_error(c, r->grpc_status != PD_GRPC_OK ? http_status_of(r->grpc_status) : 503,
                     r->grpc_status != PD_GRPC_OK ? r->grpc_message : "out of memory");
    } else {
        pd_envoy_write_response(b, r);
        answer_buffer(c, r->overall_code == PD_RLS_OVER_LIMIT ? 429 : 200, b);
    }
    free(c);
}

void pd_envoy_json(struct pd_worker *w, const char *body, size_t len, pd_envoy_http_done *done,
                   void *arg) {
    http_call stack = {done, arg}, *c = malloc(sizeof(*c));
    parsed *p = malloc(sizeof(*p));
    json_error_t jerr;
    char err[256];
    if (c == NULL || p == NULL) {
        free(c);
        free(p);
        answer_error(&stack, 503, "out of memory");
        return;
    }
    *c = stack;
    p->req = (pd_rls_request){0};
    p->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (p->root == NULL) {
        snprintf(err, sizeof(err), "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        answer_error(c, 400, err);
        free(c);
    } else if (read_request(p, err, sizeof(err)) != 0) {
        answer_error(c, 400, err);
        free(c);
    } else {
        /* The request is borrowed for the call only: the strings inside
         * root may go once it returns. */
        pd_rls_should_rate_limit(w, &p->req, on_response, c);
    }
    json_decref(p->root);
    free(p);
}

static void on_health(bool serving, void *arg) {
    http_call *c = arg;
    if (serving)
        c->done(200, "text/plain", "OK", 2, c->arg);
    else
        c->done(500, "text/plain", "NOT_SERVING", 11, c->arg);
    free(c);
}

void pd_envoy_healthcheck(struct pd_worker *w, pd_envoy_http_done *done, void *arg) {
    http_call *c = malloc(sizeof(*c));
    if (c == NULL) {
        done(503, "text/plain", "", 0, arg);
        return;
    }
    *c = (http_call){done, arg};
    pd_rls_health(w, on_health, c);
}
