/* spoe_check.c — a NOTIFY's `check` message decided, and its ACK
 * (spoe_check.h). The decision is the HTTP face's: the named policy's
 * limits chosen for the client (pd_settings_choose: tiers, overrides), one
 * porteiro_check_policy_async call (the policy's on_error, shadow mode and
 * lease apply in the library, and its top keys count there), counted in
 * /metrics, and the RateLimit fields formatted by the library.
 *
 * What a client may control (the key from a header, the cost from one)
 * never turns into an answer without `allowed`: a missing, empty or too
 * long key, or a cost that is not 0..10^9, is a denial (allowed 0) that
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
    char key[PORTEIRO_MAX_KEY_LEN + 1];
    size_t key_len;
    const char *key_error; /* why there is no key */
    int64_t cost;
    const char *cost_error;
    char tier[PORTEIRO_MAX_TIER_NAME + 1];
    bool has_tier;
} check_args;

static bool named(const uint8_t *name, size_t len, const char *want) {
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

/* The key as text: a string or binary as it is; an address as the HTTP
 * face keys a client (pd_client_key: IPv6 per /64); a number in decimal. */
static void read_key(check_args *a, const pd_spop_value *v) {
    char text[INET6_ADDRSTRLEN];
    a->key_error = NULL;
    switch (v->type) {
    case PD_SPOP_STRING:
    case PD_SPOP_BINARY:
        if (v->len > PORTEIRO_MAX_KEY_LEN) {
            a->key_error = "key over 512 bytes";
            return;
        }
        memcpy(a->key, v->data, v->len);
        a->key_len = v->len;
        break;
    case PD_SPOP_IPV4:
    case PD_SPOP_IPV6:
        inet_ntop(v->type == PD_SPOP_IPV4 ? AF_INET : AF_INET6, v->data, text, sizeof(text));
        if (pd_client_key(text, NULL, NULL, 0, a->key, sizeof(a->key)) != 0) {
            a->key_error = "key: not an address";
            return;
        }
        a->key_len = strlen(a->key);
        break;
    case PD_SPOP_INT32:
    case PD_SPOP_INT64:
        a->key_len = (size_t)snprintf(a->key, sizeof(a->key), "%" PRId64, (int64_t)v->number);
        break;
    case PD_SPOP_UINT32:
    case PD_SPOP_UINT64:
        a->key_len = (size_t)snprintf(a->key, sizeof(a->key), "%" PRIu64, v->number);
        break;
    default:
        a->key_len = 0;
        break;
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
    *job = (spoe_job){.w = w, .settings = pd_shared_settings(w->shared), .reply = reply,
                      .stream_id = sid, .frame_id = fid, .max_frame = max_frame};
    const pd_policy_http *ph = pd_settings_find(job->settings, name);
    if (ph == NULL) {
        answer_error(reply, sid, fid, max_frame, true, "unknown policy");
        job_free(job);
        return;
    }
    pd_settings_choose(job->settings, ph->policy, a.has_tier ? a.tier : NULL, a.key, a.key_len,
                       &job->choice);
    pd_worker_in_flight_add(w, 1);
    porteiro_status st = porteiro_check_policy_async(w->limiter, &job->choice.policy, a.key,
                                                     a.key_len, a.cost, w->clock_ms, on_decision,
                                                     job);
    if (st != PORTEIRO_OK) { /* the callback will not come */
        pd_worker_in_flight_add(w, -1);
        char why[160];
        snprintf(why, sizeof(why), "%s: %s", porteiro_strerror(st), porteiro_errmsg(w->limiter));
        answer_error(reply, sid, fid, max_frame, st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_INVALID,
                     why);
        job_free(job);
    }
}

void pd_spoe_notify(pd_worker *w, const pd_spop_frame *f, uint32_t max_frame,
                    pd_spoe_reply *reply) {
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    pd_spop_message m;
    if (max_frame > PD_SPOE_ACK_MAX - 4)
        max_frame = PD_SPOE_ACK_MAX - 4;
    while (pd_spop_next_message(&r, &m) == 1) {
        if (named(m.name, m.name_len, "check")) {
            check(w, f, max_frame, &m, reply);
            return;
        }
    }
    /* No check asked: acknowledged, nothing set. */
    uint8_t buf[PD_SPOE_ACK_MAX];
    pd_spop_writer wr;
    begin(&wr, buf, f->stream_id, f->frame_id, max_frame);
    send_ack(reply, &wr);
}
