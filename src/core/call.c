/* call.c — validation of a check and the layout of its Redis keys. */
#include "core/call.h"

#include <stdio.h>
#include <string.h>

#include "core/algorithms.h"
#include "core/sha256.h"
#include "core/topkeys.h"

/* "fw:P", "tb:P", "gc:P", "sw:P", "sl:P"; "cc" for leases. The key names
 * the algorithm and the period, never L or B: a client keeps what it used
 * when an operator changes its limit (the stored state is independent of L
 * and B, see algorithms.h); a new period or algorithm starts fresh. */
static int describe(const porteiro_limit *l, size_t twin, char *out, size_t outlen) {
    static const char *const tag[] = {"", "fw", "tb", "gc", "sw", "sl", "cc"};

    if (l->algorithm == PORTEIRO_CONCURRENCY)
        return snprintf(out, outlen, "cc");
    if (twin > 0)
        return snprintf(out, outlen, "%s:%lld:%zu", tag[l->algorithm], (long long)l->period_ms,
                        twin + 1);
    return snprintf(out, outlen, "%s:%lld", tag[l->algorithm], (long long)l->period_ms);
}

/* How many limits before limits[i] have its algorithm and period. A policy
 * may hold two such limits (a sustained and a peak token bucket over one
 * period); they need two states, so the second one's key ends in ":2". */
static size_t same_before(const porteiro_limit *limits, size_t i) {
    size_t n = 0;
    for (size_t j = 0; j < i; j++)
        n += limits[j].algorithm == limits[i].algorithm &&
             limits[j].period_ms == limits[i].period_ms;
    return n;
}

static porteiro_status fail(char *errbuf, size_t errlen, porteiro_status st, const char *msg) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s", msg);
    return st;
}

/* ---- The layout of a Redis key (docs/cluster.md, "Keys") ----------------
 *
 * A single check's key is   prefix ":{" K "}:" descriptor
 * when its client key K is 1..512 bytes and holds no '}': the layout older
 * versions wrote, so those counts carry on. Any other key (longer, or
 * holding a '}') is written as
 *                           prefix ":{" HEAD "}#" SHA ":" descriptor
 * SHA the 64 lowercase hex digits of the SHA-256 of the whole key, HEAD
 * its bytes before the first '}', at most 64 of them ("%" when there are
 * none). A multi-key check's item I of tag T is hashed by its OWN key, as
 * a single key is, with the tag after the braces, outside the Redis Cluster
 * hash tag:
 *                           prefix ":{" I "}=" TAG ":" descriptor
 *                           prefix ":{" HEAD "}#" SHA "=" TAG ":" descriptor
 * (I as K above: as it is, or HEAD and SHA of I), where TAG is the tag's
 * length in decimal, ":" and the tag, for a tag of 1..64 bytes without
 * '}', else "#" and the 64 hex digits of its SHA-256. The descriptor names
 * the algorithm and the period: letters, then one or two numbers
 * (describe()); it holds no '}', '#' or '='.
 *
 * No two client keys meet: K, I and HEAD hold no '}', so the braces close
 * at the first '}' (what is inside is the Redis Cluster hash tag: a single
 * check's keys are on one slot, a multi item's on its own key's slot,
 * whatever bytes a client sends; a key with a '}' keeps the slot older
 * versions gave it); the byte after them says which form follows, ":" a
 * single key as it is, "=" an item as it is, "#" a digest of fixed length
 * then ":" (single) or "=" (item); a tag is read by its length (or is a
 * digest of fixed length), so no tag's bytes can pose as another tag or
 * as a descriptor; the rest is the descriptor. Two digests differ unless
 * SHA-256 collides, which a client choosing its bytes cannot make happen.
 * Every Redis key is bounded (PT_MAX_FULL_KEY) whatever the length of the
 * client's. Items of an older version (prefix ":{" T "}:" I ...: every
 * item on its tag's slot) are moved by porteiro migrate-keys (cli/,
 * docs/cluster.md). */

/* The bytes of key before its first '}', at most PT_KEY_HEAD. */
static size_t head_of(const void *key, size_t key_len) {
    const char *k = key;
    size_t n = 0;
    while (n < key_len && n < PT_KEY_HEAD && k[n] != '}')
        n++;
    return n;
}

/* The 64 hex digits of the SHA-256 of key at out. */
static void put_sha(char *out, const void *key, size_t key_len) {
    static const char hex[] = "0123456789abcdef";
    uint8_t sum[PT_SHA256_LEN];
    pt_sha256(key, key_len, sum);
    for (size_t i = 0; i < PT_SHA256_LEN; i++) {
        out[2 * i] = hex[sum[i] >> 4];
        out[2 * i + 1] = hex[sum[i] & 15];
    }
}

/* prefix ":{" K "}" after, or prefix ":{" HEAD "}#" SHA after, at *at
 * (after: ':' a single key, '=' a multi item); *name_off and *name_len say
 * where the client's part (K, or HEAD "}#" SHA) sits. Returns the length
 * written. */
static size_t put_head(char *at, const char *prefix, size_t prefix_len, const void *key,
                       size_t key_len, char after, size_t *name_off, size_t *name_len,
                       bool *plain) {
    char *start = at;
    memcpy(at, prefix, prefix_len);
    at += prefix_len;
    memcpy(at, ":{", 2);
    at += 2;
    *name_off = (size_t)(at - start);
    *plain = key_len <= PORTEIRO_MAX_KEY_LEN && memchr(key, '}', key_len) == NULL;
    if (*plain) {
        memcpy(at, key, key_len);
        at += key_len;
        *name_len = key_len;
        *at++ = '}';
    } else {
        size_t head = head_of(key, key_len);
        memcpy(at, head > 0 ? key : "%", head > 0 ? head : 1);
        at += head > 0 ? head : 1;
        memcpy(at, "}#", 2);
        put_sha(at + 2, key, key_len);
        at += 2 + 2 * PT_SHA256_LEN;
        *name_len = (size_t)(at - start) - *name_off;
    }
    *at++ = after;
    return (size_t)(at - start);
}

/* The rest of a key after its head: the descriptor; returns its length. */
static size_t put_descriptor(char *at, const porteiro_limit *l, size_t twin) {
    return (size_t)describe(l, twin, at, 64);
}

/* A multi-key check's TAG (see above) at out: its length ":" the tag, or
 * "#" and its SHA-256. Returns its length (<= PT_TAG_PART_LEN). */
#define PT_TAG_PLAIN 64
#define PT_TAG_PART_LEN (3 + PT_TAG_PLAIN)
static size_t put_tag(char *out, const void *tag, size_t tag_len) {
    if (tag_len <= PT_TAG_PLAIN && memchr(tag, '}', tag_len) == NULL) {
        size_t n = (size_t)snprintf(out, 4, "%zu:", tag_len);
        memcpy(out + n, tag, tag_len);
        return n + tag_len;
    }
    out[0] = '#';
    put_sha(out + 1, tag, tag_len);
    return 1 + 2 * PT_SHA256_LEN;
}

static porteiro_status check_key(const void *key, size_t key_len, char *errbuf, size_t errlen) {
    if (key == NULL || key_len == 0)
        return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "the key is empty");
    return PORTEIRO_OK;
}

porteiro_status pt_call_prepare(pt_call *call, const char *prefix, size_t prefix_len,
                                const porteiro_limit *limits, size_t nlimits, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, char *errbuf,
                                size_t errlen) {
    return pt_call_prepare_in(call, prefix, prefix_len, NULL, limits, nlimits, key, key_len, cost,
                              now_ms, errbuf, errlen);
}

porteiro_status pt_call_prepare_in(pt_call *call, const char *prefix, size_t prefix_len,
                                   const char *ns, const porteiro_limit *limits, size_t nlimits,
                                   const void *key, size_t key_len, int64_t cost, int64_t now_ms,
                                   char *errbuf, size_t errlen) {
    size_t ns_len = ns != NULL ? strlen(ns) : 0;
    if (ns_len == 0) /* no name: a check of its own, no namespace */
        ns = NULL;
    if (limits == NULL || nlimits == 0 || nlimits > PORTEIRO_MAX_LIMITS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "a check needs 1 to 8 limits");
    porteiro_status kst = check_key(key, key_len, errbuf, errlen);
    if (kst != PORTEIRO_OK)
        return kst;
    if (cost < 0 || cost > PORTEIRO_MAX_AMOUNT)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "cost must be between 0 and 1000000000");
    if ((now_ms < 0 && now_ms != PORTEIRO_NOW) || now_ms > PT_MAX_NOW_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");

    call->nlimits = nlimits;
    call->cost = cost;
    call->now_ms = now_ms;
    call->max_wait_ms = 0;
    call->on_error = -1;
    call->refund = false;
    call->settle = false;
    call->delta = 0;
    call->age_ms = -1;
    call->shadow = false;
    call->lease = (porteiro_quota_lease){0, 0, 0};
    call->multi = false;
    call->any_item_shadow = false;
    call->split_out = NULL;
    call->giveback = false;
    call->global_home = NULL; /* a policy's global: is set after (limiter/global.c) */
    call->global_block_max = call->global_block_ms = call->global_timeout_ms = 0;
    memset(call->top, 0, sizeof(call->top));
    char *at = call->buf;
    size_t head = 0;
    bool plain = true;
    for (size_t i = 0; i < nlimits; i++) {
        porteiro_status st = pt_limit_normalize(&limits[i], &call->limits[i], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        if (call->limits[i].algorithm == PORTEIRO_CONCURRENCY)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "concurrency limits are not checked: use porteiro_acquire / release");
        call->alias[i] = (uint8_t)i;
        call->keys[i] = at;
        if (i == 0) { /* the head once: a long key is hashed once */
            size_t off, len;
            head = put_head(at, prefix, prefix_len, key, key_len, ns != NULL ? '=' : ':', &off,
                            &len, &plain);
            if (ns != NULL) { /* a policy's: its name as an item's tag */
                head += put_tag(at + head, ns, ns_len);
                at[head++] = ':';
            }
            call->top_off[0] = (uint16_t)off;
            call->top_len[0] = (uint16_t)len;
        } else {
            memcpy(at, call->keys[0], head);
        }
        call->key_lens[i] =
            head + put_descriptor(at + head, &call->limits[i], same_before(call->limits, i));
        at += call->key_lens[i];
    }
    /* The top keys count a key the Redis key holds as a digest under the
     * key itself when it is short (one holding a '}'): a copy after the
     * keys (a digest leaves the room). */
    if (!plain && key_len <= PT_TOP_KEY_MAX) {
        memcpy(at, key, key_len);
        call->top_off[0] = (uint16_t)(at - call->buf);
        call->top_len[0] = (uint16_t)key_len;
    }
    return PORTEIRO_OK;
}

porteiro_status pt_call_set_max_wait(pt_call *call, int64_t max_wait_ms, char *errbuf,
                                     size_t errlen) {
    if (max_wait_ms < 0 || max_wait_ms > PORTEIRO_MAX_WAIT_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "max_wait_ms must be between 0 and 86400000 (one day)");
    call->max_wait_ms = max_wait_ms;
    return PORTEIRO_OK;
}

porteiro_status pt_lease_key(char *out, size_t *out_len, const char *prefix, size_t prefix_len,
                             const void *key, size_t key_len, char *errbuf, size_t errlen) {
    static const porteiro_limit leases = {.algorithm = PORTEIRO_CONCURRENCY};
    porteiro_status st = check_key(key, key_len, errbuf, errlen);
    if (st == PORTEIRO_OK) {
        size_t off, len;
        bool plain;
        size_t head = put_head(out, prefix, prefix_len, key, key_len, ':', &off, &len, &plain);
        *out_len = head + put_descriptor(out + head, &leases, 0);
    }
    return st;
}

/* Item i's key (see above) at *at: its head (prefix ":{" ITEM "}=" TAG
 * ":", or the digest form) copied from item `same` (< i) when that one has
 * the same item key (a long key is hashed once), else written; then its
 * descriptor. Returns the key's length; top_off and top_len get where the
 * client's part sits (a short key held as a digest is counted under
 * itself: pt_call_prepare_multi copies it after the keys). */
static size_t build_item_key(pt_call *call, size_t i, char *at, const char *prefix,
                             size_t prefix_len, const char *tag, size_t tag_len, size_t same,
                             const porteiro_item *it, const porteiro_limit *l, size_t twin,
                             size_t *head_len, bool *plain) {
    size_t n;
    if (same < i) {
        n = head_len[same];
        memmove(at, call->keys[same], n);
        call->top_off[i] =
            (uint16_t)(at - call->buf + (call->top_off[same] - (call->keys[same] - call->buf)));
        call->top_len[i] = call->top_len[same];
        plain[i] = plain[same];
    } else {
        size_t off, len;
        n = put_head(at, prefix, prefix_len, it->key, it->key_len, '=', &off, &len, &plain[i]);
        call->top_off[i] = (uint16_t)(at - call->buf + off);
        call->top_len[i] = (uint16_t)len;
        memcpy(at + n, tag, tag_len);
        n += tag_len;
        at[n++] = ':';
    }
    head_len[i] = n;
    return n + put_descriptor(at + n, l, twin);
}

static bool same_item_key(const porteiro_item *a, const porteiro_item *b) {
    return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
}

/* Items of one multi-key check that name the same state (the same key,
 * algorithm and period) are one counter: the check takes one cost on it,
 * the largest of theirs (of the items not in shadow, when any is not), and
 * every item's limit is checked against that counter. They share one Redis
 * key (alias[i] is the first item with it), which every backend reads
 * before it writes any, so each evaluates the same state with the same
 * cost and writes the same value. A token bucket's and a GCRA's stored
 * state moves at its L (and B), so items of those with another L or B
 * keep a state each, as a policy's twins do (":2"...). Returns the twin
 * number of item i's key, and sets *alias (i when it has a key of its own). */
static size_t place_item(const pt_call *call, const porteiro_multi_request *req, size_t i,
                         size_t *alias) {
    const porteiro_limit *l = &call->limits[i];
    bool counter = l->algorithm == PORTEIRO_FIXED_WINDOW || l->algorithm == PORTEIRO_SLIDING_WINDOW;
    size_t twins = 0;
    *alias = i;
    for (size_t j = 0; j < i; j++) {
        const porteiro_limit *o = &call->limits[j];
        if (o->algorithm != l->algorithm || o->period_ms != l->period_ms ||
            !same_item_key(&req->items[j], &req->items[i]) || call->alias[j] != j)
            continue;
        if (counter || (o->limit == l->limit && o->burst == l->burst)) {
            *alias = j;
            return 0;
        }
        twins++;
    }
    return twins;
}

porteiro_status pt_call_prepare_multi(pt_call *call, const char *prefix, size_t prefix_len,
                                      const porteiro_multi_request *req, char *errbuf,
                                      size_t errlen) {
    if (req == NULL || req->items == NULL || req->nitems == 0 || req->nitems > PORTEIRO_MAX_LIMITS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "a multi-key check needs 1 to 8 items");
    for (size_t i = 0; i < sizeof(req->reserved) / sizeof(req->reserved[0]); i++)
        if (req->reserved[i] != NULL)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "porteiro_multi_request.reserved is not zero: a field this library "
                        "(" PORTEIRO_VERSION ") does not know");
    porteiro_status st = check_key(req->tag, req->tag_len, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    if ((req->now_ms < 0 && req->now_ms != PORTEIRO_NOW) || req->now_ms > PT_MAX_NOW_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");
    if (req->lease.max_ms != 0 &&
        (req->lease.max_ms < 0 || req->lease.max_ms > 60000 || req->lease.max_units < 1 ||
         req->lease.max_units > PORTEIRO_MAX_AMOUNT))
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "lease: max_ms must be 1..60000 and max_units 1..1000000000 (max_ms 0: off)");
    if (req->lease.replicas < 0 || req->lease.replicas > PORTEIRO_MAX_LEASE_REPLICAS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "lease: replicas must be 0..16");
    *call = (pt_call){.nlimits = req->nitems,
                      .now_ms = req->now_ms,
                      .on_error = -1,
                      .shadow = req->shadow,
                      .multi = true,
                      .lease = req->lease};
    char *at = call->buf, tag[PT_TAG_PART_LEN];
    size_t tag_len = put_tag(tag, req->tag, req->tag_len), head_len[PORTEIRO_MAX_LIMITS];
    bool plain[PORTEIRO_MAX_LIMITS];
    for (size_t i = 0; i < req->nitems; i++) {
        const porteiro_item *it = &req->items[i];
        if (it->key == NULL || it->key_len == 0)
            return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "an item's key is empty");
        if (it->cost < 0 || it->cost > PORTEIRO_MAX_AMOUNT)
            return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                        "cost must be between 0 and 1000000000");
        st = pt_limit_normalize(&it->limit, &call->limits[i], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        porteiro_algorithm a = call->limits[i].algorithm;
        if (a == PORTEIRO_CONCURRENCY || a == PORTEIRO_SLIDING_LOG)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "a multi-key check takes fixed_window, token_bucket, gcra and "
                        "sliding_window limits");
        size_t alias;
        size_t twin = place_item(call, req, i, &alias);
        call->alias[i] = (uint8_t)alias;
        call->item_shadow[i] = it->shadow;
        call->any_item_shadow = call->any_item_shadow || it->shadow;
        if (alias != i) { /* the same state as an earlier item: its key */
            call->keys[i] = call->keys[alias];
            call->key_lens[i] = call->key_lens[alias];
            call->top_off[i] = call->top_off[alias];
            call->top_len[i] = call->top_len[alias];
            continue;
        }
        size_t same = i; /* an earlier item with this item key, if any */
        for (size_t j = 0; j < i && same == i; j++)
            if (call->alias[j] == j && same_item_key(&req->items[j], it))
                same = j;
        call->keys[i] = at;
        call->key_lens[i] = build_item_key(call, i, at, prefix, prefix_len, tag, tag_len, same, it,
                                           &call->limits[i], twin, head_len, plain);
        at += call->key_lens[i];
    }
    /* The top keys count an item key the Redis key holds as a digest under
     * the key itself when it is short (one holding a '}'): a copy after
     * the keys (a digest leaves the room), once per item key. */
    for (size_t i = 0; i < req->nitems; i++) {
        const porteiro_item *it = &req->items[i];
        if (call->alias[i] != i || plain[i] || it->key_len > PT_TOP_KEY_MAX)
            continue;
        size_t same = i;
        for (size_t j = 0; j < i && same == i; j++)
            if (call->alias[j] == j && same_item_key(&req->items[j], it))
                same = j;
        if (same < i) {
            call->top_off[i] = call->top_off[same];
        } else {
            memcpy(at, it->key, it->key_len);
            call->top_off[i] = (uint16_t)(at - call->buf);
            at += it->key_len;
        }
        call->top_len[i] = (uint16_t)it->key_len;
    }
    for (size_t i = 0; i < req->nitems; i++) { /* the items that share a state */
        call->top_off[i] = call->top_off[call->alias[i]];
        call->top_len[i] = call->top_len[call->alias[i]];
    }
    /* One cost per state: the largest of its items' (of those not in
     * shadow, when one is not: a shadow item enforces nothing). */
    for (size_t i = 0; i < req->nitems; i++) {
        int64_t cost = -1, shadow_cost = 0;
        for (size_t j = 0; j < req->nitems; j++) {
            if (call->alias[j] != call->alias[i])
                continue;
            if (req->items[j].shadow)
                shadow_cost = req->items[j].cost > shadow_cost ? req->items[j].cost : shadow_cost;
            else if (req->items[j].cost > cost)
                cost = req->items[j].cost;
        }
        call->costs[i] = cost >= 0 ? cost : shadow_cost;
        call->cost += call->costs[i];
    }
    /* One item, not in shadow, is a single check of its item's key: the
     * same state and the same answer, and like any single check it may
     * share a batch, the flat script and the module's command. */
    if (req->nitems == 1 && !call->any_item_shadow)
        call->multi = false;
    return PORTEIRO_OK;
}

void pt_call_item_shadow(const pt_call *call, porteiro_decision *d) {
    if (!call->any_item_shadow)
        return;
    bool shadow_denied = false;
    d->allowed = true;
    d->denied_by = -1;
    d->retry_after_ms = 0;
    for (size_t i = 0; i < d->nlimits; i++) {
        if (d->limits[i].allowed)
            continue;
        if (call->item_shadow[i])
            shadow_denied = true;
        else
            pt_decision_deny(d, i);
    }
    d->shadow_denied = d->allowed && shadow_denied;
}

void pt_call_copy(pt_call *dst, const pt_call *src) {
    memcpy(dst, src, sizeof(*dst));
    /* The keys point into the call's own buffer: point them into dst's. */
    for (size_t i = 0; i < src->nlimits; i++)
        if (src->keys[i] >= src->buf && src->keys[i] < src->buf + sizeof(src->buf))
            dst->keys[i] = dst->buf + (src->keys[i] - src->buf);
}

/* ---- Migrating an older version's multi-key items (docs/cluster.md) ----- */

static bool all_digits(const char *s, size_t n) {
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static bool all_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* The algorithm a descriptor's letters name, of those a multi-key check
 * takes; 0 for any other. */
static porteiro_algorithm multi_algorithm(const char *s, size_t n) {
    static const char *const names[] = {"", "fw", "tb", "gc", "sw"};
    for (int a = 1; a <= 4; a++)
        if (n == 2 && memcmp(s, names[a], 2) == 0)
            return (porteiro_algorithm)a;
    return (porteiro_algorithm)0;
}

/* The last ':' in s[0..n), or NULL. */
static const char *last_colon(const char *s, size_t n) {
    while (n > 0)
        if (s[--n] == ':')
            return s + n;
    return NULL;
}

int pt_call_migrate_name(const char *prefix, size_t prefix_len, const char *name, size_t len,
                         char *out, size_t *out_len, porteiro_algorithm *algorithm) {
    if (len < prefix_len + 3 || memcmp(name, prefix, prefix_len) != 0 ||
        memcmp(name + prefix_len, ":{", 2) != 0)
        return PT_MIGRATE_NOT;
    const char *t = name + prefix_len + 2, *end = name + len;
    const char *close = memchr(t, '}', (size_t)(end - t));
    if (close == NULL || end - close < 3)
        return PT_MIGRATE_NOT;
    char tag[PT_TAG_PART_LEN];
    size_t tag_len;
    const char *r;                      /* what follows the tag: the item and the descriptor */
    if (close[1] == ':' && close > t) { /* a tag as it is */
        tag_len = put_tag(tag, t, (size_t)(close - t));
        r = close + 2;
    } else if (close[1] == '#' && end - close >= 2 + 64 + 1 && all_hex(close + 2, 64) &&
               close[66] == ':') { /* a tag's digest: this layout's too */
        tag[0] = '#';
        memcpy(tag + 1, close + 2, 64);
        tag_len = 65;
        r = close + 67;
    } else {
        return PT_MIGRATE_NOT; /* "=": this layout's item already */
    }
    /* The descriptor, read from the end: letters ":" digits [":" digits]. */
    size_t rl = (size_t)(end - r);
    const char *c1 = last_colon(r, rl);
    if (c1 == NULL || !all_digits(c1 + 1, (size_t)(end - c1 - 1)))
        return PT_MIGRATE_NOT;
    const char *c2 = last_colon(r, (size_t)(c1 - r));
    const char *field = c2 != NULL ? c2 + 1 : r; /* the field before the last */
    const char *d = NULL, *sep = NULL;           /* the descriptor, the ':' before it */
    size_t flen = (size_t)(c1 - field);
    bool digest_item = false;
    if (all_digits(field, flen)) { /* a twin: letters ":" P ":" n */
        const char *c3 = c2 != NULL ? last_colon(r, (size_t)(c2 - r)) : NULL;
        field = c3 != NULL ? c3 + 1 : r;
        flen = (size_t)(c2 != NULL ? c2 - field : 0);
        sep = c3;
    } else {
        sep = c2;
    }
    if (c2 == NULL && field != r)
        return PT_MIGRATE_NOT;
    if (flen == 3 && field[0] == '#') { /* an item written as its digest, "~SHA:#D" */
        digest_item = true;
        field++;
        flen--;
    }
    *algorithm = multi_algorithm(field, flen);
    if (*algorithm == 0 || sep == NULL || sep == r)
        return PT_MIGRATE_NOT; /* no item before the descriptor: a single check's key */
    d = field;
    if (end - d > 48)
        return PT_MIGRATE_NOT; /* no descriptor is that long: bounded out */
    if (digest_item) {         /* IHEAD "~" ISHA: the item's bytes are gone */
        size_t il = (size_t)(sep - r);
        return il >= 65 && r[il - 65] == '~' && all_hex(sep - 64, 64) ? PT_MIGRATE_LOST
                                                                      : PT_MIGRATE_NOT;
    }
    /* prefix ":{" ITEM "}=" TAG ":" D, as pt_call_prepare_multi builds it. */
    size_t off, nlen;
    bool plain;
    size_t n = put_head(out, prefix, prefix_len, r, (size_t)(sep - r), '=', &off, &nlen, &plain);
    memcpy(out + n, tag, tag_len);
    n += tag_len;
    out[n++] = ':';
    memcpy(out + n, d, (size_t)(end - d));
    *out_len = n + (size_t)(end - d);
    return PT_MIGRATE_NEW;
}

size_t pt_call_single_head(const char *prefix, size_t prefix_len, const char *name, size_t len) {
    if (len < prefix_len + 5 || memcmp(name, prefix, prefix_len) != 0 ||
        memcmp(name + prefix_len, ":{", 2) != 0)
        return 0;
    const char *t = name + prefix_len + 2, *end = name + len;
    const char *close = memchr(t, '}', (size_t)(end - t));
    if (close == NULL || close == t || end - close < 3)
        return 0;
    if (close[1] == ':') /* K as it is */
        return (size_t)(close + 1 - name);
    if (close[1] == '#' && end - close >= 2 + 64 + 2 && all_hex(close + 2, 64) &&
        close[66] == ':') /* HEAD "}#" SHA */
        return (size_t)(close + 66 - name);
    return 0; /* "=": an item; anything else: no check's key */
}
