/* spoe_check.c — a NOTIFY's `check` message decided, and its ACK
 * (spoe_check.h). The decision is the HTTP face's: the named policy's
 * limits chosen for the client (pd_settings_choose: tiers, overrides), one
 * porteiro_check_async (.policy) call (the policy's on_error, shadow mode and
 * lease apply in the library, and its top keys count there), counted in
 * /metrics, and the RateLimit fields formatted by the library.
 *
 * What a client may control (the key from a header, the cost from one)
 * never turns into an answer without `allowed`: a key of any length is
 * limited (one over 512 bytes under a hashed Redis key, as on every face:
 * docs/cluster.md, "Keys"); a missing or empty key, or a cost that is not
 * 0..10^9, is a denial (allowed 0) that
 * says why in `error`, so that a haproxy.cfg denying on allowed 0 cannot be
 * bypassed by sending a strange header. Only a failure of the limiter
 * itself (Redis with on_error: error) leaves `allowed` unset: that is the
 * configuration's choice, as HAProxy's own SPOE errors are (docs/haproxy.md). */
#include "spoe_check.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rules/envoy.h"
#include "envoy/envoy_rls.h"
#include "ops/client_key.h"
#include "ops/json_io.h"
#include "ops/settings.h"
#include "ops/worker.h"

#define TXN PD_SPOP_SCOPE_TXN

/* One decision between its NOTIFY and its ACK. */
typedef struct spoe_job {
    pd_worker *w;
    pd_settings *settings; /* a reference: the policy stays valid */
    pd_spoe_reply *reply;
    uint64_t stream_id, frame_id;
    uint32_t max_frame;
    porteiro_choice choice; /* the limits that applied, for the RateLimit fields */
} spoe_job;

/* What the message asked, read from its arguments. */
typedef struct check_args {
    const uint8_t *policy;
    size_t policy_len;
    bool has_policy;
    const char *key; /* a string's or binary's bytes (in the frame), or text */
    size_t key_len;
    char text[INET6_ADDRSTRLEN + 24]; /* an address's or a number's key */
    const char *key_error;            /* why there is no key */
    int64_t cost;
    const char *cost_error;
    char tier[PORTEIRO_MAX_TIER_NAME + 1];
    bool has_tier;
} check_args;

static bool named(const uint8_t *name, size_t len, const char *want) {
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

/* The key: a string or binary as it is, of any length (the frame's bytes:
 * the library copies what it keeps); an address as the HTTP face keys a
 * client (pd_client_key: IPv6 per /64); a number in decimal. */
static void read_key(check_args *a, const pd_spop_value *v) {
    char text[INET6_ADDRSTRLEN];
    a->key_error = NULL;
    a->key = a->text;
    switch (v->type) {
        case PD_SPOP_STRING:
        case PD_SPOP_BINARY:
            a->key = (const char *)v->data;
            a->key_len = v->len;
            break;
        case PD_SPOP_IPV4:
        case PD_SPOP_IPV6:
            inet_ntop(v->type == PD_SPOP_IPV4 ? AF_INET : AF_INET6, v->data, text, sizeof(text));
            if (pd_client_key(text, NULL, NULL, 0, a->text, sizeof(a->text)) != 0) {
                a->key_error = "key: not an address";
                return;
            }
            a->key_len = strlen(a->text);
            break;
        case PD_SPOP_INT32:
        case PD_SPOP_INT64:
            a->key_len = (size_t)snprintf(a->text, sizeof(a->text), "%" PRId64, (int64_t)v->number);
            break;
        case PD_SPOP_UINT32:
        case PD_SPOP_UINT64:
            a->key_len = (size_t)snprintf(a->text, sizeof(a->text), "%" PRIu64, v->number);
            break;
        default: a->key_len = 0; break;
    }
    if (a->key_len == 0)
        a->key_error = "missing key";
}

/* cost: an integer 0..10^9 (a signed one sent negative is refused), or
 * the same as decimal text (a header's value). */
static void read_cost(check_args *a, const pd_spop_value *v) {
    a->cost_error = "cost: expected an integer from 0 to 10^9";
    uint64_t n = v->number;
    if (v->type == PD_SPOP_STRING) {
        if (v->len == 0 || v->len > 10)
            return;
        n = 0;
        for (size_t i = 0; i < v->len; i++) {
            if (v->data[i] < '0' || v->data[i] > '9')
                return;
            n = n * 10 + (uint64_t)(v->data[i] - '0');
        }
    } else if (v->type == PD_SPOP_INT32 || v->type == PD_SPOP_INT64) {
        if ((int64_t)n < 0)
            return;
    } else if (v->type != PD_SPOP_UINT32 && v->type != PD_SPOP_UINT64) {
        return;
    }
    if (n > (uint64_t)PORTEIRO_MAX_AMOUNT)
        return;
    a->cost = (int64_t)n;
    a->cost_error = NULL;
}

static void read_args(pd_spop_message *m, check_args *a) {
    const uint8_t *name;
    size_t len;
    pd_spop_value v;
    a->has_policy = a->has_tier = false;
    a->key = a->text;
    a->key_len = 0;
    a->key_error = "missing key";
    a->cost = 1;
    a->cost_error = NULL;
    while (pd_spop_next_arg(m, &name, &len, &v) == 1) {
        if (named(name, len, "policy") && v.type == PD_SPOP_STRING) {
            a->policy = v.data;
            a->policy_len = v.len;
            a->has_policy = true;
        } else if (named(name, len, "key")) {
            read_key(a, &v);
        } else if (named(name, len, "cost") && v.type != PD_SPOP_NULL) {
            read_cost(a, &v);
        } else if (named(name, len, "tier") && v.type == PD_SPOP_STRING) {
            /* A tier name too long to be one: no tier (the default). */
            size_t n = v.len <= PORTEIRO_MAX_TIER_NAME ? v.len : 0;
            memcpy(a->tier, v.data, n);
            a->tier[n] = '\0';
            a->has_tier = n > 0;
        } /* other arguments: ignored */
    }
}

/* ---- the ACK -------------------------------------------------------------- */

static void set_str(pd_spop_writer *wr, const char *name, const char *s) {
    pd_spop_set_var_string(wr, TXN, name, s, strlen(s));
}

/* Sends the ACK written so far (or closes with RESOURCE when even the
 * frame's head did not fit, which a max_frame of 256 always allows). */
static void send_ack(pd_spoe_reply *reply, pd_spop_writer *wr) {
    size_t n = pd_spop_end(wr);
    reply->fn(reply, n > 0 ? wr->buf : NULL, n);
}

static void begin(pd_spop_writer *wr, uint8_t *buf, uint64_t sid, uint64_t fid,
                  uint32_t max_frame) {
    pd_spop_begin(wr, buf, PD_SPOE_ACK_MAX, max_frame, PD_SPOP_ACK, sid, fid);
}

/* No decision: why, and (deny) allowed 0 when the cause is the request's. */
static void answer_error(pd_spoe_reply *reply, uint64_t sid, uint64_t fid, uint32_t max_frame,
                         bool deny, const char *why) {
    uint8_t buf[PD_SPOE_ACK_MAX];
    pd_spop_writer wr;
    begin(&wr, buf, sid, fid, max_frame);
    if (deny)
        pd_spop_set_var_int(&wr, TXN, "allowed", 0);
    pd_spop_set_var_string(&wr, TXN, "error", why, strnlen(why, 160));
    send_ack(reply, &wr);
}

static const char *fallback_name(porteiro_fallback f) {
    switch (f) {
        case PORTEIRO_FALLBACK_OPEN: return "open";
        case PORTEIRO_FALLBACK_CLOSED: return "closed";
        case PORTEIRO_FALLBACK_LOCAL: return "local";
        default: return NULL;
    }
}

/* The decision as variables, the most useful first: whatever would take
 * the frame over max_frame is left out, whole (pd_spop_set_var_*). */
static void answer(spoe_job *job, const porteiro_decision *d) {
    uint8_t buf[PD_SPOE_ACK_MAX];
    pd_spop_writer wr;
    const porteiro_policy *pol = &job->choice.policy;
    porteiro_http_fields h;
    porteiro_http_fields_format(pol->name, pol->limits, pol->nlimits, d, &h);
    begin(&wr, buf, job->stream_id, job->frame_id, job->max_frame);
    pd_spop_set_var_int(&wr, TXN, "allowed", d->allowed ? 1 : 0);
    pd_spop_set_var_int(&wr, TXN, "remaining", d->remaining);
    pd_spop_set_var_int(&wr, TXN, "limit", d->limit);
    pd_spop_set_var_int(&wr, TXN, "reset_ms", d->reset_ms);
    pd_spop_set_var_int(&wr, TXN, "retry_after_ms", d->retry_after_ms);
    if (h.retry_after[0] != '\0')
        pd_spop_set_var_int(&wr, TXN, "retry_after", strtoll(h.retry_after, NULL, 10));
    const char *fb = fallback_name(d->fallback);
    if (fb != NULL)
        set_str(&wr, "fallback", fb);
    if (d->shadow_denied)
        pd_spop_set_var_int(&wr, TXN, "shadow_denied", 1);
    set_str(&wr, "ratelimit", h.ratelimit);
    set_str(&wr, "ratelimit_policy", h.policy);
    send_ack(job->reply, &wr);
}

static void job_free(spoe_job *job) {
    pd_settings_unref(job->settings);
    free(job);
}

static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    spoe_job *job = arg;
    (void)p;
    pd_worker_in_flight_add(job->w, -1);
    pd_worker_count_decision(job->w, job->choice.policy.name, st, d);
    if (st != PORTEIRO_OK) { /* on_error: error, and Redis failed */
        char why[160];
        snprintf(why, sizeof(why), "rate limiter unavailable: %s", porteiro_strerror(st));
        answer_error(job->reply, job->stream_id, job->frame_id, job->max_frame, false, why);
    } else {
        answer(job, d);
    }
    job_free(job);
}

/* ---- the message -------------------------------------------------------- */

static void check(pd_worker *w, const pd_spop_frame *f, uint32_t max_frame, pd_spop_message *m,
                  pd_spoe_reply *reply) {
    check_args a;
    read_args(m, &a);
    uint64_t sid = f->stream_id, fid = f->frame_id;
    char name[PD_MAX_POLICY_NAME + 1];
    if (!a.has_policy || a.policy_len == 0 || a.policy_len > PD_MAX_POLICY_NAME) {
        answer_error(reply, sid, fid, max_frame, true, "missing policy");
        return;
    }
    memcpy(name, a.policy, a.policy_len);
    name[a.policy_len] = '\0';
    const char *bad = a.key_error != NULL ? a.key_error : a.cost_error;
    if (bad != NULL) {
        answer_error(reply, sid, fid, max_frame, true, bad);
        return;
    }
    spoe_job *job = malloc(sizeof(*job));
    if (job == NULL) {
        reply->fn(reply, NULL, 0);
        return;
    }
    *job = (spoe_job){.w = w,
                      .settings = pd_shared_settings(w->shared),
                      .reply = reply,
                      .stream_id = sid,
                      .frame_id = fid,
                      .max_frame = max_frame};
    const pd_policy_http *ph = pd_settings_find(job->settings, name);
    if (ph == NULL) {
        answer_error(reply, sid, fid, max_frame, true, "unknown policy");
        job_free(job);
        return;
    }
    pd_settings_choose(job->settings, ph->policy, a.has_tier ? a.tier : NULL, a.key, a.key_len,
                       &job->choice);
    pd_worker_in_flight_add(w, 1);
    porteiro_status st = porteiro_check_async(w->limiter,
                                              &(porteiro_request){.policy = &job->choice.policy,
                                                                  .key = a.key,
                                                                  .key_len = a.key_len,
                                                                  .cost = a.cost,
                                                                  .now_ms = w->clock_ms},
                                              on_decision, job);
    if (st != PORTEIRO_OK) { /* the callback will not come */
        pd_worker_in_flight_add(w, -1);
        char why[160];
        snprintf(why, sizeof(why), "%s: %s", porteiro_strerror(st), porteiro_errmsg(w->limiter));
        answer_error(reply, sid, fid, max_frame,
                     st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_INVALID, why);
        job_free(job);
    }
}

/* ---- envoy-style descriptors ------------------------------------------------
 * `domain` and arguments named dN.KEY (N from 0 to 9: descriptor N, KEY one
 * of its entries, in the order sent): envoy ratelimit's config decides them
 * (the envoy: section, envoy_rls.h), every limit of the request in one call,
 * all-or-nothing. */

#define MAX_DESCRIPTORS 10
#define MAX_ENTRY_TEXT 64 /* an address or a number as text */

typedef struct rls_args {
    pd_rls_descriptor descriptors[MAX_DESCRIPTORS];
    pd_rls_entry entries[MAX_DESCRIPTORS][PE_MAX_DEPTH];
    char text[MAX_DESCRIPTORS][PE_MAX_DEPTH][MAX_ENTRY_TEXT];
    const char *error; /* a request this face refuses: allowed 0 */
} rls_args;

/* One dN.KEY argument: its value as an entry of descriptor N. */
static void add_entry(rls_args *a, const uint8_t *name, size_t len, const pd_spop_value *v) {
    unsigned d = (unsigned)(name[1] - '0');
    pd_rls_descriptor *desc = &a->descriptors[d];
    if (desc->nentries == PE_MAX_DEPTH) {
        a->error = "descriptor: more than 16 entries";
        return;
    }
    char *text = a->text[d][desc->nentries];
    pd_rls_entry *e = &a->entries[d][desc->nentries];
    *e = (pd_rls_entry){.key = (const char *)name + 3, .key_len = len - 3};
    switch (v->type) {
        case PD_SPOP_STRING:
        case PD_SPOP_BINARY:
            e->value = (const char *)v->data;
            e->value_len = v->len;
            break;
        case PD_SPOP_IPV4:
        case PD_SPOP_IPV6:
            inet_ntop(v->type == PD_SPOP_IPV4 ? AF_INET : AF_INET6, v->data, text, MAX_ENTRY_TEXT);
            e->value = text;
            e->value_len = strlen(text);
            break;
        case PD_SPOP_INT32:
        case PD_SPOP_INT64:
        case PD_SPOP_UINT32:
        case PD_SPOP_UINT64: {
            bool is_signed = v->type == PD_SPOP_INT32 || v->type == PD_SPOP_INT64;
            if (is_signed)
                snprintf(text, MAX_ENTRY_TEXT, "%" PRId64, (int64_t)v->number);
            else
                snprintf(text, MAX_ENTRY_TEXT, "%" PRIu64, v->number);
            e->value = text;
            e->value_len = strlen(text);
            break;
        }
        default:
            e->value = "";
            e->value_len = 0; /* absent (NULL): an empty value; such requests share a counter */
            break;
    }
    desc->entries = a->entries[d];
    desc->nentries++;
}

static bool is_entry_name(const uint8_t *name, size_t len) {
    return len > 3 && name[0] == 'd' && name[1] >= '0' && name[1] <= '9' && name[2] == '.';
}

/* One descriptors check between its NOTIFY and its ACK. */
typedef struct rls_job {
    pd_spoe_reply *reply;
    uint64_t stream_id, frame_id;
    uint32_t max_frame;
    char domain[PD_MAX_POLICY_NAME + 1];
} rls_job;

/* The status that limits now: an over-limit one first, else the least
 * remaining (NULL: no descriptor had a limit). */
static const pd_rls_status *limiting(const pd_rls_response *r) {
    const pd_rls_status *min = NULL;
    for (size_t i = 0; i < r->nstatuses; i++) {
        const pd_rls_status *st = &r->statuses[i];
        if (!st->has_limit)
            continue;
        bool over = st->code == PD_RLS_OVER_LIMIT,
             min_over = min != NULL && min->code == PD_RLS_OVER_LIMIT;
        if (min == NULL || (over && !min_over) ||
            (over == min_over && st->limit_remaining < min->limit_remaining))
            min = st;
    }
    return min;
}

static void on_rls(const pd_rls_response *r, void *arg) {
    rls_job *job = arg;
    if (r->grpc_status != PD_GRPC_OK) {
        /* The request's fault (INVALID_ARGUMENT): denied; the limiter's: no decision. */
        answer_error(job->reply, job->stream_id, job->frame_id, job->max_frame,
                     r->grpc_status == PD_GRPC_INVALID_ARGUMENT,
                     r->grpc_message != NULL && r->grpc_message[0] != '\0'
                         ? r->grpc_message
                         : "rate limit service error");
        free(job);
        return;
    }
    uint8_t buf[PD_SPOE_ACK_MAX];
    pd_spop_writer wr;
    begin(&wr, buf, job->stream_id, job->frame_id, job->max_frame);
    bool allowed = r->overall_code != PD_RLS_OVER_LIMIT;
    pd_spop_set_var_int(&wr, TXN, "allowed", allowed ? 1 : 0);
    const pd_rls_status *st = limiting(r);
    if (st != NULL) {
        int64_t reset = st->duration_until_reset_ms > 0 ? st->duration_until_reset_ms : 0;
        int64_t secs = (reset + 999) / 1000;
        pd_spop_set_var_int(&wr, TXN, "remaining", st->limit_remaining);
        pd_spop_set_var_int(&wr, TXN, "limit", st->requests_per_unit);
        pd_spop_set_var_int(&wr, TXN, "reset_ms", reset);
        pd_spop_set_var_int(&wr, TXN, "retry_after_ms", allowed ? 0 : reset);
        if (!allowed)
            pd_spop_set_var_int(&wr, TXN, "retry_after", secs);
        char field[PD_MAX_POLICY_NAME + 64];
        snprintf(field, sizeof(field), "\"%s\";r=%u;t=%lld", job->domain, st->limit_remaining,
                 (long long)secs);
        set_str(&wr, "ratelimit", field);
        snprintf(field, sizeof(field), "\"%s\";q=%u;w=%lld", job->domain, st->requests_per_unit,
                 (long long)pe_unit_seconds((pe_unit)st->unit));
        set_str(&wr, "ratelimit_policy", field);
    }
    send_ack(job->reply, &wr);
    free(job);
}

static void check_descriptors(pd_worker *w, const pd_spop_frame *f, uint32_t max_frame,
                              pd_spop_message *m, const pd_spop_value *domain,
                              pd_spoe_reply *reply) {
    uint64_t sid = f->stream_id, fid = f->frame_id;
    rls_args *a = calloc(1, sizeof(*a));
    rls_job *job = a != NULL ? malloc(sizeof(*job)) : NULL;
    if (job == NULL) {
        free(a);
        reply->fn(reply, NULL, 0);
        return;
    }
    *job = (rls_job){.reply = reply, .stream_id = sid, .frame_id = fid, .max_frame = max_frame};
    const uint8_t *name;
    size_t len;
    pd_spop_value v;
    uint64_t hits = 1;
    while (pd_spop_next_arg(m, &name, &len, &v) == 1) {
        if (is_entry_name(name, len)) {
            add_entry(a, name, len, &v);
        } else if (named(name, len, "cost") && v.type != PD_SPOP_NULL) {
            check_args c = {.cost = 1};
            read_cost(&c, &v);
            if (c.cost_error != NULL)
                a->error = c.cost_error;
            hits = (uint64_t)c.cost;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < MAX_DESCRIPTORS; i++)
        if (a->descriptors[i].nentries > 0) {
            a->descriptors[n] = a->descriptors[i];
            /* cost 0 is envoy's hits_addend 0: one hit, as envoy ratelimit counts it */
            a->descriptors[n].has_hits_addend = hits > 0;
            a->descriptors[n].hits_addend = hits;
            n++;
        }
    if (domain->len == 0 || domain->len > PD_MAX_POLICY_NAME)
        a->error = "domain: 1 to 128 bytes";
    else if (n == 0 && a->error == NULL)
        a->error = "no descriptor (arguments d0.KEY to d9.KEY)";
    if (a->error != NULL) {
        answer_error(reply, sid, fid, max_frame, true, a->error);
        free(job);
        free(a);
        return;
    }
    memcpy(job->domain, domain->data, domain->len);
    job->domain[domain->len] = '\0';
    pd_rls_request req = {.domain = job->domain,
                          .domain_len = domain->len,
                          .descriptors = a->descriptors,
                          .ndescriptors = n};
    pd_rls_should_rate_limit(w, &req, on_rls, job); /* borrows req for the call only */
    free(a);
}

void pd_spoe_notify(pd_worker *w, const pd_spop_frame *f, uint32_t max_frame,
                    pd_spoe_reply *reply) {
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    pd_spop_message m;
    if (max_frame > PD_SPOE_ACK_MAX - 4)
        max_frame = PD_SPOE_ACK_MAX - 4;
    while (pd_spop_next_message(&r, &m) == 1) {
        if (!named(m.name, m.name_len, "check"))
            continue;
        /* A domain argument: envoy-style descriptors; else a policy. */
        pd_spop_message look = m;
        const uint8_t *name;
        size_t len;
        pd_spop_value v;
        while (pd_spop_next_arg(&look, &name, &len, &v) == 1)
            if (named(name, len, "domain") && v.type == PD_SPOP_STRING) {
                check_descriptors(w, f, max_frame, &m, &v, reply);
                return;
            }
        check(w, f, max_frame, &m, reply);
        return;
    }
    /* No check asked: acknowledged, nothing set. */
    uint8_t buf[PD_SPOE_ACK_MAX];
    pd_spop_writer wr;
    begin(&wr, buf, f->stream_id, f->frame_id, max_frame);
    send_ack(reply, &wr);
}
