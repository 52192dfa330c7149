/* overrides.c — per-client limits stored in Redis, changed at run time:
 *   PREFIX:overrides:{POLICY}   a hash, field = client key, value = compact
 *                               limits ("gcra 100/1s burst 200, ...")
 *   PREFIX:overrides:version    a counter, raised by every change
 * The blocking calls (porteiro_override_*) are for tools. Servers keep a
 * local copy (porteiro_overrides_start): a thread reads the version every
 * refresh_ms and reloads the hashes only when it moved, so a lookup is a
 * binary search in memory and a client without an override costs Redis
 * nothing. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limiter/handle.h"

#define OV_DEFAULT_REFRESH_MS 500
#define OV_POLICY_MAX 64
#define OV_TEXT_MAX 512 /* the compact text of up to PORTEIRO_MAX_LIMITS limits */

/* ---- names and text ------------------------------------------------- */

static bool valid_policy(const char *s) {
    size_t n = s != NULL ? strlen(s) : 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return false;
    return n > 0 && n <= OV_POLICY_MAX;
}

/* "PREFIX:overrides:{POLICY}": the policy in braces, one Cluster slot each. */
static size_t hash_key(const char *prefix, const char *policy, char *out, size_t outlen) {
    int n = snprintf(out, outlen, "%s:overrides:{%s}", prefix, policy);
    return n > 0 && (size_t)n < outlen ? (size_t)n : 0;
}

static size_t version_key(const char *prefix, char *out, size_t outlen) {
    int n = snprintf(out, outlen, "%s:overrides:version", prefix);
    return n > 0 && (size_t)n < outlen ? (size_t)n : 0;
}

/* The largest unit that divides ms: 3600000 → "1h", 1500 → "1500ms". */
static void duration_text(int64_t ms, char *out, size_t outlen) {
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (ms % units[i].ms == 0) {
            snprintf(out, outlen, "%" PRId64 "%s", ms / units[i].ms, units[i].unit);
            return;
        }
    snprintf(out, outlen, "%" PRId64 "ms", ms);
}

/* Parses and checks text; out gets its canonical form ("" on error, with
 * the message in errbuf). */
static porteiro_status parse_text(const char *text, porteiro_limit *limits, size_t *n, char *out,
                                  size_t outlen, char *errbuf, size_t errlen) {
    char msg[200] = "";
    out[0] = '\0';
    if (text == NULL || porteiro_parse_limits(text, limits, PORTEIRO_MAX_LIMITS, n, msg,
                                              sizeof(msg)) != PORTEIRO_OK) {
        if (msg[0] != '\0')
            snprintf(errbuf, errlen, "%s", msg);
        else
            snprintf(errbuf, errlen, "limits '%.200s': invalid", text != NULL ? text : "");
        return PORTEIRO_ERR_INVALID;
    }
    size_t used = 0;
    for (size_t i = 0; i < *n; i++) {
        if (limits[i].algorithm == PORTEIRO_CONCURRENCY) {
            snprintf(errbuf, errlen,
                     "limits '%.180s': concurrency limits are not checked in a "
                     "policy",
                     text);
            return PORTEIRO_ERR_INVALID;
        }
        char period[32], burst[40] = "";
        duration_text(limits[i].period_ms, period, sizeof(period));
        if (limits[i].burst > 0)
            snprintf(burst, sizeof(burst), " burst %" PRId64, limits[i].burst);
        int w =
            snprintf(out + used, outlen - used, "%s%s %" PRId64 "/%s%s", i > 0 ? ", " : "",
                     porteiro_algorithm_name(limits[i].algorithm), limits[i].limit, period, burst);
        if (w < 0 || (size_t)w >= outlen - used) {
            snprintf(errbuf, errlen, "limits '%.200s': too long", text);
            return PORTEIRO_ERR_INVALID;
        }
        used += (size_t)w;
    }
    return PORTEIRO_OK;
}

/* ---- blocking calls (tools) ----------------------------------------- */

/* Common entry: arguments checked, Redis there, p->mu taken. */
static porteiro_status enter(porteiro_t *p, const char *policy, const void *key, size_t key_len,
                             bool need_key) {
    if (p == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = PORTEIRO_OK;
    if (p->redis == NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "overrides set at run time live in Redis; the memory backend takes overrides "
                 "only from the config file (policies.NAME.overrides)");
        st = PORTEIRO_ERR_UNSUPPORTED;
    } else if (!valid_policy(policy)) {
        snprintf(p->errmsg, sizeof(p->errmsg),
                 "a policy name is 1 to 64 letters, digits, '_', '-' or '.'");
        st = PORTEIRO_ERR_INVALID;
    } else if (need_key && (key == NULL || key_len == 0 || key_len > PORTEIRO_MAX_KEY_LEN)) {
        snprintf(p->errmsg, sizeof(p->errmsg), "a key is 1 to %d bytes", PORTEIRO_MAX_KEY_LEN);
        st = PORTEIRO_ERR_KEY;
    }
    if (st != PORTEIRO_OK)
        pthread_mutex_unlock(&p->mu);
    return st;
}

/* One command about `routing` (a key); Redis's own errors become a status. */
static porteiro_status command(porteiro_t *p, const char *routing, size_t routing_len, int argc,
                               const char **argv, const size_t *lens, redisReply **reply) {
    porteiro_status st = pt_router_command_key(p->redis, routing, routing_len, argc, argv, lens,
                                               reply, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: %.*s", (int)(*reply)->len, (*reply)->str);
        freeReplyObject(*reply);
        *reply = NULL;
        st = PORTEIRO_ERR_REDIS;
    }
    return st;
}

/* INCR of the version: every server's copy reloads. */
static porteiro_status bump(porteiro_t *p) {
    char vkey[PT_MAX_PREFIX + 32];
    size_t vlen = version_key(p->prefix, vkey, sizeof(vkey));
    const char *argv[] = {"INCR", vkey};
    size_t lens[] = {4, vlen};
    redisReply *reply = NULL;
    porteiro_status st = command(p, vkey, vlen, 2, argv, lens, &reply);
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}

/* verb on the policy's hash: HSET (key, value), HGET / HDEL (key), HGETALL. */
static porteiro_status hash_command(porteiro_t *p, const char *verb, const char *policy,
                                    const void *key, size_t key_len, const char *value,
                                    redisReply **reply) {
    char hkey[PT_MAX_PREFIX + OV_POLICY_MAX + 16];
    size_t hlen = hash_key(p->prefix, policy, hkey, sizeof(hkey));
    const char *argv[] = {verb, hkey, key, value};
    size_t lens[] = {strlen(verb), hlen, key_len, value != NULL ? strlen(value) : 0};
    int argc = key == NULL ? 2 : value == NULL ? 3 : 4;
    return command(p, hkey, hlen, argc, argv, lens, reply);
}

porteiro_status porteiro_override_set(porteiro_t *p, const char *policy, const void *key,
                                      size_t key_len, const char *limits) {
    porteiro_status st = enter(p, policy, key, key_len, true);
    if (st != PORTEIRO_OK)
        return st;
    porteiro_limit parsed[PORTEIRO_MAX_LIMITS];
    size_t n = 0;
    char text[OV_TEXT_MAX];
    st = parse_text(limits, parsed, &n, text, sizeof(text), p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK) {
        redisReply *reply = NULL;
        st = hash_command(p, "HSET", policy, key, key_len, text, &reply);
        if (reply != NULL)
            freeReplyObject(reply);
        if (st == PORTEIRO_OK)
            st = bump(p);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

porteiro_status porteiro_override_get(porteiro_t *p, const char *policy, const void *key,
                                      size_t key_len, char *out, size_t outlen, bool *found) {
    if (out == NULL || outlen == 0 || found == NULL)
        return PORTEIRO_ERR_INVALID;
    out[0] = '\0';
    *found = false;
    porteiro_status st = enter(p, policy, key, key_len, true);
    if (st != PORTEIRO_OK)
        return st;
    redisReply *reply = NULL;
    st = hash_command(p, "HGET", policy, key, key_len, NULL, &reply);
    if (st == PORTEIRO_OK && reply->type == REDIS_REPLY_STRING) {
        snprintf(out, outlen, "%.*s", (int)reply->len, reply->str);
        *found = true;
    }
    if (reply != NULL)
        freeReplyObject(reply);
    pthread_mutex_unlock(&p->mu);
    return st;
}

porteiro_status porteiro_override_del(porteiro_t *p, const char *policy, const void *key,
                                      size_t key_len, bool *deleted) {
    if (deleted == NULL)
        return PORTEIRO_ERR_INVALID;
    *deleted = false;
    porteiro_status st = enter(p, policy, key, key_len, true);
    if (st != PORTEIRO_OK)
        return st;
    redisReply *reply = NULL;
    st = hash_command(p, "HDEL", policy, key, key_len, NULL, &reply);
    *deleted = st == PORTEIRO_OK && reply->type == REDIS_REPLY_INTEGER && reply->integer > 0;
    if (reply != NULL)
        freeReplyObject(reply);
    if (*deleted)
        st = bump(p);
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* HGETALL of one policy's hash (small: one entry per overridden client). */
static porteiro_status fetch_all(porteiro_t *p, const char *policy, redisReply **reply) {
    porteiro_status st = hash_command(p, "HGETALL", policy, NULL, 0, NULL, reply);
    if (st == PORTEIRO_OK && ((*reply)->type != REDIS_REPLY_ARRAY || (*reply)->elements % 2 != 0)) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: HGETALL answered something unexpected");
        freeReplyObject(*reply);
        *reply = NULL;
        st = PORTEIRO_ERR_PROTOCOL;
    }
    return st;
}

porteiro_status porteiro_override_list(porteiro_t *p, const char *policy, porteiro_override_fn *cb,
                                       void *privdata) {
    if (cb == NULL)
        return PORTEIRO_ERR_INVALID;
    porteiro_status st = enter(p, policy, NULL, 0, false);
    if (st != PORTEIRO_OK)
        return st;
    redisReply *reply = NULL;
    st = fetch_all(p, policy, &reply);
    for (size_t i = 0; st == PORTEIRO_OK && i + 1 < reply->elements; i += 2) {
        const redisReply *k = reply->element[i], *v = reply->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        char text[OV_TEXT_MAX];
        snprintf(text, sizeof(text), "%.*s", (int)v->len, v->str);
        cb(k->str, k->len, text, privdata);
    }
    if (reply != NULL)
        freeReplyObject(reply);
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* ---- the local copy (servers) --------------------------------------- */

typedef struct ov_entry {
    size_t policy; /* index into the copy's policies */
    char *key;
    size_t key_len;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
} ov_entry;

typedef struct ov_table {
    ov_entry *entries; /* sorted by (policy, key bytes) */
    size_t n;
} ov_table;

struct porteiro_overrides {
    porteiro_t *p; /* its own handle: blocking calls on its thread */
    char **policies;
    size_t npolicies;
    int refresh_ms;
    pthread_t thread;
    pthread_mutex_t mu; /* guards table, stop, reloads, version */
    pthread_cond_t wake;
    bool stop;
    ov_table table;
    _Atomic size_t count; /* entries in table: 0 → no lock per lookup */
    uint64_t reloads;
    int64_t version; /* last seen; -1 before the first load */
};

static int entry_cmp(const void *a, const void *b) {
    const ov_entry *x = a, *y = b;
    if (x->policy != y->policy)
        return x->policy < y->policy ? -1 : 1;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c != 0)
        return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

static void table_free(ov_table *t) {
    for (size_t i = 0; i < t->n; i++)
        free(t->entries[i].key);
    free(t->entries);
    t->entries = NULL;
    t->n = 0;
}

/* Adds one policy's hash to t; an entry that does not parse is skipped
 * with a message (a tool wrote it: porteiro_override_set never does). */
static void table_add(ov_table *t, size_t policy, const char *name, const redisReply *all) {
    ov_entry *grown = realloc(t->entries, (t->n + all->elements / 2 + 1) * sizeof(ov_entry));
    if (grown == NULL)
        return;
    t->entries = grown;
    for (size_t i = 0; i + 1 < all->elements; i += 2) {
        const redisReply *k = all->element[i], *v = all->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || k->len == 0 ||
            k->len > PORTEIRO_MAX_KEY_LEN)
            continue;
        ov_entry *e = &t->entries[t->n];
        char text[OV_TEXT_MAX], canon[OV_TEXT_MAX], err[256];
        snprintf(text, sizeof(text), "%.*s", (int)v->len, v->str);
        if (parse_text(text, e->limits, &e->nlimits, canon, sizeof(canon), err, sizeof(err)) !=
            PORTEIRO_OK) {
            fprintf(stderr, "porteiro: override of policy %s skipped: %s\n", name, err);
            continue;
        }
        if ((e->key = malloc(k->len)) == NULL)
            continue;
        memcpy(e->key, k->str, k->len);
        e->key_len = k->len;
        e->policy = policy;
        t->n++;
    }
}

/* Reads the version; on a change (or the first time) reloads every hash.
 * A failure keeps the copy in use. */
static void refresh(porteiro_overrides *ov) {
    porteiro_t *p = ov->p;
    char vkey[PT_MAX_PREFIX + 32];
    pthread_mutex_lock(&p->mu);
    size_t vlen = version_key(p->prefix, vkey, sizeof(vkey));
    const char *argv[] = {"GET", vkey};
    size_t lens[] = {3, vlen};
    redisReply *reply = NULL;
    porteiro_status st = command(p, vkey, vlen, 2, argv, lens, &reply);
    int64_t version = 0;
    if (st == PORTEIRO_OK && reply->type == REDIS_REPLY_STRING)
        version = strtoll(reply->str, NULL, 10);
    if (reply != NULL)
        freeReplyObject(reply);
    pthread_mutex_lock(&ov->mu);
    bool same = ov->version == version;
    pthread_mutex_unlock(&ov->mu);
    ov_table fresh = {NULL, 0};
    for (size_t i = 0; st == PORTEIRO_OK && !same && i < ov->npolicies; i++) {
        redisReply *all = NULL;
        st = fetch_all(p, ov->policies[i], &all);
        if (st == PORTEIRO_OK)
            table_add(&fresh, i, ov->policies[i], all);
        if (all != NULL)
            freeReplyObject(all);
    }
    pthread_mutex_unlock(&p->mu);
    if (st != PORTEIRO_OK || same) {
        table_free(&fresh);
        return;
    }
    if (fresh.n > 1) /* qsort(NULL, 0, ...) is undefined (UBSan) */
        qsort(fresh.entries, fresh.n, sizeof(ov_entry), entry_cmp);
    pthread_mutex_lock(&ov->mu);
    ov_table old = ov->table;
    ov->table = fresh;
    ov->count = fresh.n;
    ov->version = version;
    ov->reloads++;
    pthread_mutex_unlock(&ov->mu);
    table_free(&old);
}

static void *refresher(void *arg) {
    porteiro_overrides *ov = arg;
    pthread_mutex_lock(&ov->mu);
    while (!ov->stop) {
        pthread_mutex_unlock(&ov->mu);
        refresh(ov);
        pthread_mutex_lock(&ov->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = until.tv_nsec + (int64_t)ov->refresh_ms * 1000000;
        until.tv_sec += (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        while (!ov->stop && pthread_cond_timedwait(&ov->wake, &ov->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&ov->mu);
    return NULL;
}

static void overrides_free(porteiro_overrides *ov) {
    for (size_t i = 0; i < ov->npolicies; i++)
        free(ov->policies[i]);
    free(ov->policies);
    table_free(&ov->table);
    porteiro_free(ov->p);
    pthread_mutex_destroy(&ov->mu);
    pthread_cond_destroy(&ov->wake);
    free(ov);
}

porteiro_overrides *porteiro_overrides_start(const porteiro_options *opts,
                                             const char *const *policies, size_t npolicies,
                                             int refresh_ms, porteiro_status *err, char *errbuf,
                                             size_t errlen) {
    porteiro_status st = PORTEIRO_OK;
    if (err == NULL)
        err = &st;
    porteiro_options mine;
    const char *why = opts != NULL ? pt_options_copy(&mine, opts, err) : NULL;
    if (why != NULL) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s", why);
        return NULL;
    }
    *err = PORTEIRO_ERR_INVALID;
    if (opts == NULL || mine.redis_url == NULL || mine.redis_url[0] == '\0' || refresh_ms < 0 ||
        (policies == NULL && npolicies > 0)) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "overrides need a Redis URL");
        return NULL;
    }
    porteiro_overrides *ov = calloc(1, sizeof(*ov));
    if (ov == NULL || (ov->policies = calloc(npolicies + 1, sizeof(char *))) == NULL) {
        free(ov);
        *err = PORTEIRO_ERR_NOMEM;
        return NULL;
    }
    pthread_mutex_init(&ov->mu, NULL);
    pthread_cond_init(&ov->wake, NULL);
    ov->refresh_ms = refresh_ms > 0 ? refresh_ms : OV_DEFAULT_REFRESH_MS;
    ov->version = -1;
    for (size_t i = 0; i < npolicies; i++) {
        char *name = valid_policy(policies[i]) ? strdup(policies[i]) : NULL;
        if (name != NULL)
            ov->policies[ov->npolicies++] = name;
    }
    mine.on_error = PORTEIRO_ON_ERROR_ERROR;
    mine.deny_cache_keys = 0;
    ov->p = porteiro_new(&mine, err, errbuf, errlen);
    if (ov->p == NULL) {
        overrides_free(ov);
        return NULL;
    }
    refresh(ov); /* the first copy before the first request, if Redis answers */
    if (pthread_create(&ov->thread, NULL, refresher, ov) != 0) {
        overrides_free(ov);
        *err = PORTEIRO_ERR_NOMEM;
        return NULL;
    }
    *err = PORTEIRO_OK;
    return ov;
}

void porteiro_overrides_stop(porteiro_overrides *ov) {
    if (ov == NULL)
        return;
    pthread_mutex_lock(&ov->mu);
    ov->stop = true;
    pthread_cond_signal(&ov->wake);
    pthread_mutex_unlock(&ov->mu);
    pthread_join(ov->thread, NULL);
    overrides_free(ov);
}

bool porteiro_overrides_apply(porteiro_overrides *ov, porteiro_choice *choice, const void *key,
                              size_t key_len) {
    if (ov == NULL || choice == NULL || key == NULL || ov->count == 0 ||
        choice->policy.name == NULL)
        return false;
    size_t policy = 0;
    while (policy < ov->npolicies && strcmp(ov->policies[policy], choice->policy.name) != 0)
        policy++;
    if (policy == ov->npolicies)
        return false;
    ov_entry probe = {.policy = policy, .key = (char *)key, .key_len = key_len};
    bool found = false;
    pthread_mutex_lock(&ov->mu);
    const ov_entry *e =
        bsearch(&probe, ov->table.entries, ov->table.n, sizeof(ov_entry), entry_cmp);
    if (e != NULL) {
        memcpy(choice->policy.limits, e->limits, sizeof(e->limits));
        choice->policy.nlimits = e->nlimits;
        choice->by = PORTEIRO_CHOSEN_REDIS_OVERRIDE;
        found = true;
    }
    pthread_mutex_unlock(&ov->mu);
    return found;
}

uint64_t porteiro_overrides_reloads(porteiro_overrides *ov, int64_t *version) {
    if (ov == NULL)
        return 0;
    pthread_mutex_lock(&ov->mu);
    uint64_t n = ov->reloads;
    if (version != NULL)
        *version = ov->version;
    pthread_mutex_unlock(&ov->mu);
    return n;
}
