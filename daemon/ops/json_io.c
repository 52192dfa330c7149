/* json_io.c — request bodies parsed with jansson; answers written directly
 * (their shape is fixed, and only strings need escaping). */
#include "json_io.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

static int read_policy(json_t *value, char out[PD_MAX_POLICY_NAME + 1], char *err, size_t errlen) {
    if (!json_is_string(value) || json_string_length(value) == 0 ||
        json_string_length(value) > PD_MAX_POLICY_NAME ||
        strlen(json_string_value(value)) != json_string_length(value))
        return fail(err, errlen, "\"policy\" must be a non-empty string (at most 128 bytes)");
    memcpy(out, json_string_value(value), json_string_length(value) + 1);
    return 0;
}

/* A key of any length (porteiro limits a long one under its digest):
 * *out is allocated (the caller frees it). */
static int read_key(json_t *value, char **out, size_t *len, char *err, size_t errlen) {
    size_t n = json_string_length(value);
    if (!json_is_string(value) || n == 0)
        return fail(err, errlen, "\"key\" must be a non-empty string");
    free(*out); /* cannot happen: duplicates are refused */
    *out = malloc(n);
    if (*out == NULL)
        return fail(err, errlen, "out of memory");
    memcpy(*out, json_string_value(value), n);
    *len = n;
    return 0;
}

static int read_fields(json_t *root, pd_check_body *out, char *err, size_t errlen) {
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        if (strcmp(name, "policy") == 0) {
            if (read_policy(value, out->policy, err, errlen) != 0)
                return -1;
        } else if (strcmp(name, "key") == 0) {
            if (read_key(value, &out->key, &out->key_len, err, errlen) != 0)
                return -1;
        } else if (strcmp(name, "cost") == 0) {
            if (!json_is_integer(value) || json_integer_value(value) < 0 ||
                json_integer_value(value) > PORTEIRO_MAX_AMOUNT)
                return fail(err, errlen, "\"cost\" must be an integer from 0 to 1000000000");
            out->cost = (int64_t)json_integer_value(value);
        } else {
            snprintf(err, errlen, "unknown field (expected policy, key, cost)");
            return -1;
        }
    }
    return 0;
}

/* A request body's JSON object (NULL with err: malformed, or not an
 * object). NUL is allowed inside strings: keys are binary-safe. */
static json_t *load_object(const char *body, size_t len, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL) {
        snprintf(err, errlen, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column,
                 jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        fail(err, errlen, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* The fields every body names: policy and key. */
static int need_policy_key(const char *policy, size_t key_len, char *err, size_t errlen) {
    if (policy[0] == '\0')
        return fail(err, errlen, "\"policy\" is missing");
    if (key_len == 0)
        return fail(err, errlen, "\"key\" is missing");
    return 0;
}

int pd_parse_check_body(const char *body, size_t len, pd_check_body *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->cost = 1;
    json_t *root = load_object(body, len, err, errlen);
    if (root == NULL)
        return -1;
    int rc = read_fields(root, out, err, errlen);
    json_decref(root);
    if (rc == 0)
        rc = need_policy_key(out->policy, out->key_len, err, errlen);
    if (rc != 0)
        pd_check_body_free(out);
    return rc;
}

/* An integer field of 0..max into *v. */
static int read_amount(json_t *value, const char *name, int64_t max, int64_t *v, char *err,
                       size_t errlen) {
    if (!json_is_integer(value) || json_integer_value(value) < 0 ||
        json_integer_value(value) > max) {
        snprintf(err, errlen, "\"%s\" must be an integer from 0 to %lld", name, (long long)max);
        return -1;
    }
    *v = (int64_t)json_integer_value(value);
    return 0;
}

static int read_settle_fields(json_t *root, pd_settle_body *out, char *err, size_t errlen) {
    const char *name;
    json_t *value;
    bool estimate = false, used = false;
    json_object_foreach(root, name, value) {
        int rc = 0;
        if (strcmp(name, "policy") == 0) {
            rc = read_policy(value, out->policy, err, errlen);
        } else if (strcmp(name, "key") == 0) {
            rc = read_key(value, &out->key, &out->key_len, err, errlen);
        } else if (strcmp(name, "estimate") == 0 || strcmp(name, "cost") == 0) {
            if (estimate)
                return fail(err, errlen, "give \"estimate\" or \"cost\", not both");
            estimate = true;
            rc = read_amount(value, name, PORTEIRO_MAX_AMOUNT, &out->usage.estimate, err, errlen);
        } else if (strcmp(name, "used") == 0) {
            used = true;
            rc = read_amount(value, name, PORTEIRO_MAX_AMOUNT, &out->usage.used, err, errlen);
        } else if (strcmp(name, "age_ms") == 0) {
            rc = read_amount(value, name, 2 * PORTEIRO_MAX_PERIOD_MS, &out->usage.age_ms, err,
                             errlen);
        } else {
            return fail(err, errlen,
                        "unknown field (expected policy, key, estimate, used, age_ms)");
        }
        if (rc != 0)
            return rc;
    }
    if (!estimate)
        return fail(err, errlen, "\"estimate\" is missing (the cost the check was sent with)");
    if (!used)
        return fail(err, errlen, "\"used\" is missing (the units really used)");
    return 0;
}

int pd_parse_settle_body(const char *body, size_t len, pd_settle_body *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->usage.age_ms = -1;
    json_t *root = load_object(body, len, err, errlen);
    if (root == NULL)
        return -1;
    int rc = read_settle_fields(root, out, err, errlen);
    json_decref(root);
    if (rc == 0)
        rc = need_policy_key(out->policy, out->key_len, err, errlen);
    if (rc != 0)
        pd_settle_body_free(out);
    return rc;
}

void pd_settle_body_free(pd_settle_body *b) {
    free(b->key);
    b->key = NULL;
    b->key_len = 0;
}

/* The length of the well-formed UTF-8 sequence at p (n bytes left), or 0
 * when there is none: no overlong form, no surrogate, nothing past
 * U+10FFFF (RFC 3629). */
static size_t utf8_sequence(const unsigned char *p, size_t n) {
    if (p[0] < 0x80)
        return 1;
    size_t len = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
                 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
                 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                                : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) || /* overlong, surrogate */
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))   /* overlong, > U+10FFFF */
        return 0;
    return len;
}

void pd_check_body_free(pd_check_body *b) {
    free(b->key);
    b->key = NULL;
    b->key_len = 0;
}

void pd_json_string(struct evbuffer *out, const char *text, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *t = (const unsigned char *)text;
    char buf[256];
    size_t n = 0;
    buf[n++] = '"';
    for (size_t i = 0; i < len;) {
        unsigned char c = t[i];
        if (n > sizeof(buf) - 8) {
            evbuffer_add(out, buf, n);
            n = 0;
        }
        size_t seq = utf8_sequence(t + i, len - i);
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20 || c == 0x7f || seq == 0) {
            /* A control byte, or a byte that is no UTF-8 (a client's key may
             * hold any bytes): \u00XX, so the answer stays valid JSON and
             * valid UTF-8, and each such byte still shows which it was. */
            memcpy(buf + n, "\\u00", 4);
            buf[n + 4] = hex[c >> 4];
            buf[n + 5] = hex[c & 15];
            n += 6;
            seq = 1;
        } else {
            memcpy(buf + n, t + i, seq); /* well-formed UTF-8 as it is */
            n += seq;
        }
        i += seq;
    }
    buf[n++] = '"';
    evbuffer_add(out, buf, n);
}

/* The code point of a well-formed sequence of seq bytes. */
static long code_point(const unsigned char *p, size_t seq) {
    static const unsigned char lead_mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    long cp = p[0] & lead_mask[seq];
    for (size_t i = 1; i < seq; i++)
        cp = (cp << 6) | (p[i] & 0x3f);
    return cp;
}

/* What a terminal would act on rather than show (as porteiro top's
 * top_view_safe judges): C0 controls, DEL, C1 controls, the bidirectional
 * formatting characters. */
static bool unsafe_code_point(long cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

size_t pd_key_text(const char *key, size_t len, const char *also, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *t = (const unsigned char *)key;
    size_t n = 0;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < len;) {
        size_t seq = utf8_sequence(t + i, len - i);
        bool escaped = seq == 0 || unsafe_code_point(code_point(t + i, seq));
        if (escaped) {
            size_t bytes = seq == 0 ? 1 : seq;
            if (n + 4 * bytes >= cap)
                break;
            for (size_t b = 0; b < bytes; b++, n += 4) {
                out[n] = '\\';
                out[n + 1] = 'x';
                out[n + 2] = hex[t[i + b] >> 4];
                out[n + 3] = hex[t[i + b] & 15];
            }
            i += bytes;
        } else if (t[i] == '\\' || (also != NULL && t[i] != '\0' && strchr(also, t[i]) != NULL)) {
            if (n + 2 >= cap)
                break;
            out[n++] = '\\';
            out[n++] = (char)t[i++];
        } else {
            if (n + seq >= cap)
                break;
            memcpy(out + n, t + i, seq);
            n += seq;
            i += seq;
        }
    }
    out[n] = '\0';
    return n;
}

void pd_json_key(struct evbuffer *out, const char *key, size_t len) {
    char text[4 * PORTEIRO_TOP_KEY_MAX + 1];
    pd_json_string(out, text, pd_key_text(key, len, NULL, text, sizeof(text)));
}

void pd_json_error(struct evbuffer *out, const char *message) {
    evbuffer_add(out, "{\"error\":", 9);
    pd_json_string(out, message, strlen(message));
    evbuffer_add(out, "}\n", 2);
}

static const char *fallback_name(porteiro_fallback f) {
    switch (f) {
        case PORTEIRO_FALLBACK_OPEN: return "open";
        case PORTEIRO_FALLBACK_CLOSED: return "closed";
        case PORTEIRO_FALLBACK_LOCAL: return "local";
        case PORTEIRO_FALLBACK_NONE: break;
    }
    return NULL;
}

static void result_fields(struct evbuffer *out, const porteiro_result *r) {
    evbuffer_add_printf(out,
                        "\"allowed\":%s,\"limit\":%lld,\"remaining\":%lld,\"reset_ms\":%lld,"
                        "\"retry_after_ms\":%lld",
                        r->allowed ? "true" : "false", (long long)r->limit, (long long)r->remaining,
                        (long long)r->reset_ms, (long long)r->retry_after_ms);
    if (r->wait_ms > 0) /* a reservation: only then, so other answers keep their shape */
        evbuffer_add_printf(out, ",\"wait_ms\":%lld", (long long)r->wait_ms);
}

/* Every field of a decision, without the closing brace. */
static void decision_fields(struct evbuffer *out, const char *policy, const porteiro_decision *d) {
    porteiro_result whole = {d->allowed,  d->limit,          d->remaining,
                             d->reset_ms, d->retry_after_ms, d->wait_ms};
    evbuffer_add(out, "{\"policy\":", 10);
    pd_json_string(out, policy, strlen(policy));
    evbuffer_add(out, ",", 1);
    result_fields(out, &whole);
    evbuffer_add_printf(out, ",\"denied_by\":%d,\"limits\":[", d->denied_by);
    for (size_t i = 0; i < d->nlimits; i++) {
        evbuffer_add(out, i > 0 ? ",{" : "{", i > 0 ? 2 : 1);
        result_fields(out, &d->limits[i]);
        evbuffer_add(out, "}", 1);
    }
    evbuffer_add(out, "]", 1);
    if (d->shadow_denied) /* shadow mode: allowed, but the limits said no */
        evbuffer_add_printf(out, ",\"shadow_denied\":true");
    const char *fb = fallback_name(d->fallback);
    if (fb != NULL)
        evbuffer_add_printf(out, ",\"fallback\":\"%s\",\"reason\":\"%s\"", fb,
                            porteiro_strerror(d->fallback_reason));
}

void pd_json_decision(struct evbuffer *out, const char *policy, const porteiro_decision *d) {
    decision_fields(out, policy, d);
    evbuffer_add(out, "}\n", 2);
}

static void chosen_fields(struct evbuffer *out, const porteiro_choice *c) {
    if (c->tier != NULL) {
        evbuffer_add(out, ",\"tier\":", 8);
        pd_json_string(out, c->tier, strlen(c->tier));
    }
    if (c->by == PORTEIRO_CHOSEN_REDIS_OVERRIDE || c->by == PORTEIRO_CHOSEN_CONFIG_OVERRIDE)
        evbuffer_add_printf(out, ",\"override\":\"%s\"",
                            c->by == PORTEIRO_CHOSEN_REDIS_OVERRIDE ? "redis" : "config");
}

void pd_json_settle(struct evbuffer *out, const char *policy, const porteiro_decision *d,
                    const porteiro_usage *u, const porteiro_choice *c) {
    decision_fields(out, policy, d);
    evbuffer_add_printf(out, ",\"estimate\":%lld,\"used\":%lld,\"debt\":%lld,\"debt_added\":%lld",
                        (long long)u->estimate, (long long)u->used, (long long)d->debt,
                        (long long)d->debt_added);
    chosen_fields(out, c);
    evbuffer_add(out, "}\n", 2);
}

void pd_json_decision_chosen(struct evbuffer *out, const char *policy, const porteiro_decision *d,
                             const porteiro_choice *c) {
    decision_fields(out, policy, d);
    chosen_fields(out, c);
    evbuffer_add(out, "}\n", 2);
}
