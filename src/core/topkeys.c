/* topkeys.c — Space-Saving summaries in rings of intervals (topkeys.h). */
#include "core/topkeys.h"

#include "core/siphash.h"

#include <stdlib.h>
#include <string.h>

/* Interval lengths and ring sizes of the two views (topkeys.h). */
static const int64_t interval_ms[2] = {10000, 60000};
static const int ring_len[2] = {7, 11};
#define NRINGS 2
#define NOUTCOMES 2
#define SUMMARIES_PER_OUTCOME (7 + 11)
#define NO_INTERVAL INT64_MIN

typedef struct slot {
    uint64_t hash;
    int64_t error;
    uint8_t len;
    char key[PT_TOP_KEY_MAX];
} slot;

/* The counts sit in the heap itself: a sift reads one small array. */
typedef struct hent {
    int64_t count;
    uint32_t slot;
} hent;

typedef struct summary {
    int64_t interval; /* now_ms / interval_ms of what it holds */
    int64_t total;    /* units counted */
    uint32_t used;
    hent *heap;      /* a min-heap by count */
    uint16_t *index; /* open addressing by hash: slot + 1, 0 empty */
    uint64_t *ihash; /* the hash at each index place: probes stay in two arrays */
    uint16_t *pos;   /* each slot's place in the heap (which holds its count) */
    slot *slots;
} summary;

struct pt_topkeys {
    uint32_t k, mask; /* mask: index size - 1 (a power of two >= 2k) */
    int nout;         /* outcomes held: 0..nout-1 (pt_topkeys_new_outcomes) */
    size_t bytes;
    /* The summary each outcome's ring is filling and the interval it
     * covers, [from_ms, to_ms): most decisions need no division. */
    summary *cur[NOUTCOMES][NRINGS];
    int64_t from_ms[NOUTCOMES][NRINGS], to_ms[NOUTCOMES][NRINGS];
    summary s[NOUTCOMES][SUMMARIES_PER_OUTCOME];
};

uint64_t pt_top_hash(const void *key, size_t len) {
    /* Keyed (SipHash under the process's random key): keys are told apart
     * by this hash alone, so a hash a client could invert or search would
     * let it count its traffic under another key's name. */
    return pt_keyed_hash(key, len);
}

pt_topkeys *pt_topkeys_new(size_t k) {
    return pt_topkeys_new_outcomes(k, NOUTCOMES);
}

pt_topkeys *pt_topkeys_new_outcomes(size_t k, int nout) {
    if (k < PT_TOP_MIN_K || k > PT_TOP_MAX_K || nout < 1 || nout > NOUTCOMES)
        return NULL;
    uint32_t isize = 1;
    while (isize < 4 * k) /* a quarter full: probes are short */
        isize <<= 1;
    size_t per = k * sizeof(slot) + k * sizeof(hent) + isize * sizeof(uint64_t) +
                 (isize + k) * sizeof(uint16_t);
    per = (per + 7) & ~(size_t)7; /* the next summary's slots stay aligned */
    size_t n = (size_t)nout * SUMMARIES_PER_OUTCOME;
    pt_topkeys *t = calloc(1, sizeof(*t));
    char *mem = calloc(n, per);
    if (t == NULL || mem == NULL) {
        free(t);
        free(mem);
        return NULL;
    }
    t->k = (uint32_t)k;
    t->nout = nout;
    t->mask = isize - 1;
    t->bytes = sizeof(*t) + n * per;
    for (int o = 0; o < nout; o++)
        for (int i = 0; i < SUMMARIES_PER_OUTCOME; i++) {
            summary *s = &t->s[o][i];
            s->interval = NO_INTERVAL;
            s->slots = (slot *)(void *)mem;
            s->heap = (hent *)(void *)(mem + k * sizeof(slot));
            s->ihash = (uint64_t *)(void *)(s->heap + k);
            s->index = (uint16_t *)(void *)(s->ihash + isize);
            s->pos = s->index + isize;
            mem += per;
        }
    return t;
}

void pt_topkeys_free(pt_topkeys *t) {
    if (t == NULL)
        return;
    free(t->s[0][0].slots); /* the one block */
    free(t);
}

size_t pt_topkeys_k(const pt_topkeys *t) {
    return t->k;
}
size_t pt_topkeys_memory(const pt_topkeys *t) {
    return t->bytes;
}

/* ---- one summary -------------------------------------------------------- */

static void sift_down(summary *s, uint32_t i) {
    hent *h = s->heap;
    hent x = h[i];
    uint32_t used = s->used;
    for (;;) {
        uint32_t l = 2 * i + 1;
        if (l >= used)
            break;
        /* the smaller child, without a branch to mispredict */
        uint32_t m = l + (uint32_t)(l + 1 < used && h[l + 1].count < h[l].count);
        if (h[m].count >= x.count)
            break;
        h[i] = h[m];
        s->pos[h[i].slot] = (uint16_t)i;
        i = m;
    }
    h[i] = x;
    s->pos[x.slot] = (uint16_t)i;
}

static void sift_up(summary *s, uint32_t i) {
    hent *h = s->heap;
    hent x = h[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h[parent].count <= x.count)
            break;
        h[i] = h[parent];
        s->pos[h[i].slot] = (uint16_t)i;
        i = parent;
    }
    h[i] = x;
    s->pos[x.slot] = (uint16_t)i;
}

/* Backward-shift deletion of index position i (linear probing). */
static void index_delete(summary *s, uint32_t mask, uint32_t i) {
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (s->index[j] == 0)
            break;
        uint32_t home = (uint32_t)s->ihash[j] & mask;
        /* The entry at j may move to i unless its home lies in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            s->index[i] = s->index[j];
            s->ihash[i] = s->ihash[j];
            i = j;
        }
    }
    s->index[i] = 0;
}

static void set_key(slot *sl, uint64_t hash, const void *key, size_t len) {
    sl->hash = hash;
    if (len <= PT_TOP_KEY_MAX) {
        memcpy(sl->key, key, len);
        sl->len = (uint8_t)len;
        return;
    }
    static const char hex[] = "0123456789abcdef";
    /* Cut at a character boundary: a UTF-8 character is not split (up to 3
     * continuation bytes go with it), so what is shown stays text. */
    const unsigned char *k = key;
    size_t cut = PT_TOP_KEY_CUT;
    while (cut > PT_TOP_KEY_CUT - 3 && (k[cut] & 0xc0) == 0x80)
        cut--;
    memcpy(sl->key, key, cut);
    sl->key[cut] = '~';
    for (int i = 0; i < 16; i++)
        sl->key[cut + 1 + i] = hex[(hash >> (60 - 4 * i)) & 0xf];
    sl->len = (uint8_t)(cut + 17);
}

static void summary_reset(summary *s, uint32_t mask, int64_t interval) {
    s->interval = interval;
    s->total = 0;
    s->used = 0;
    memset(s->index, 0, (mask + 1) * sizeof(uint16_t));
}

static void summary_add(summary *s, uint32_t k, uint32_t mask, uint64_t hash, const void *key,
                        size_t len, int64_t units) {
    s->total += units;
    uint32_t i = (uint32_t)hash & mask;
    while (s->index[i] != 0) {
        if (s->ihash[i] == hash) {
            uint16_t at = s->pos[s->index[i] - 1];
            s->heap[at].count += units;
            sift_down(s, at);
            return;
        }
        i = (i + 1) & mask;
    }
    if (s->used < k) {
        uint32_t n = s->used++;
        slot *sl = &s->slots[n];
        set_key(sl, hash, key, len);
        sl->error = 0;
        s->heap[n] = (hent){units, n};
        s->index[i] = (uint16_t)(n + 1);
        s->ihash[i] = hash;
        sift_up(s, n);
        return;
    }
    /* Full: the smallest counter takes the new key, and its count as the
     * new key's possible overcount (Space-Saving's step). */
    uint32_t victim = s->heap[0].slot;
    slot *sl = &s->slots[victim];
    uint32_t j = (uint32_t)sl->hash & mask;
    while (s->index[j] != victim + 1)
        j = (j + 1) & mask;
    index_delete(s, mask, j);
    sl->error = s->heap[0].count;
    s->heap[0].count += units;
    set_key(sl, hash, key, len);
    i = (uint32_t)hash & mask;
    while (s->index[i] != 0)
        i = (i + 1) & mask;
    s->index[i] = (uint16_t)(victim + 1);
    s->ihash[i] = hash;
    sift_down(s, 0);
}

/* The smallest counter of a full summary (0 otherwise): the most units a
 * key it does not hold may have had in it. */
static int64_t summary_floor(const summary *s, uint32_t k) {
    return s->used < k ? 0 : s->heap[0].count;
}

/* ---- rings ----------------------------------------------------------- */

static summary *ring(pt_topkeys *t, int outcome, int r) {
    return &t->s[outcome][r == 0 ? 0 : ring_len[0]];
}

void pt_topkeys_add_hashed(pt_topkeys *t, int outcome, uint64_t hash, const void *key, size_t len,
                           int64_t units, int64_t now_ms) {
    if (t == NULL || len == 0 || units <= 0 || now_ms < 0 || outcome < 0 || outcome >= t->nout)
        return;
    for (int r = 0; r < NRINGS; r++) {
        summary *s = t->cur[outcome][r];
        if (s == NULL || now_ms < t->from_ms[outcome][r] || now_ms >= t->to_ms[outcome][r]) {
            int64_t iv = now_ms / interval_ms[r];
            s = &ring(t, outcome, r)[iv % ring_len[r]];
            if (s->interval > iv)
                continue; /* a clock that went back: not counted */
            if (s->interval != iv)
                summary_reset(s, t->mask, iv);
            t->cur[outcome][r] = s;
            t->from_ms[outcome][r] = iv * interval_ms[r];
            t->to_ms[outcome][r] = t->from_ms[outcome][r] + interval_ms[r];
        }
        summary_add(s, t->k, t->mask, hash, key, len, units);
    }
}

void pt_topkeys_add(pt_topkeys *t, int outcome, const void *key, size_t len, int64_t units,
                    int64_t now_ms) {
    pt_topkeys_add_hashed(t, outcome, pt_top_hash(key, len), key, len, units, now_ms);
}

/* ---- merging --------------------------------------------------------- */

void pt_top_acc_init(pt_top_acc *acc) {
    memset(acc, 0, sizeof(*acc));
}

void pt_top_acc_free(pt_top_acc *acc) {
    free(acc->e);
    memset(acc, 0, sizeof(*acc));
}

static bool acc_grow(pt_top_acc *acc) {
    size_t cap = acc->cap == 0 ? 256 : acc->cap * 2;
    pt_top_entry *e = calloc(cap, sizeof(*e));
    if (e == NULL)
        return false;
    for (size_t i = 0; i < acc->cap; i++) {
        if (acc->e[i].len == 0)
            continue;
        size_t j = acc->e[i].hash & (cap - 1);
        while (e[j].len != 0)
            j = (j + 1) & (cap - 1);
        e[j] = acc->e[i];
    }
    free(acc->e);
    acc->e = e;
    acc->cap = cap;
    return true;
}

static void acc_summary(pt_top_acc *acc, const summary *s, uint32_t k) {
    int64_t floor = summary_floor(s, k);
    acc->total += s->total;
    acc->min_sum += floor;
    for (uint32_t i = 0; i < s->used; i++) {
        const slot *sl = &s->slots[s->heap[i].slot];
        int64_t count = s->heap[i].count;
        if (2 * (acc->n + 1) > acc->cap && !acc_grow(acc)) {
            acc->nomem = true;
            return;
        }
        size_t j = sl->hash & (acc->cap - 1);
        while (acc->e[j].len != 0 && acc->e[j].hash != sl->hash)
            j = (j + 1) & (acc->cap - 1);
        pt_top_entry *e = &acc->e[j];
        if (e->len == 0) {
            e->hash = sl->hash;
            e->len = sl->len;
            memcpy(e->key, sl->key, sl->len);
            acc->n++;
        }
        e->count += count;
        e->lower += count - sl->error;
        e->present_min += floor;
    }
}

void pt_top_acc_add(pt_top_acc *acc, const pt_topkeys *t, int outcome, int window, int64_t now_ms) {
    if (t == NULL || (window != 0 && window != 1) || outcome < 0 || outcome >= t->nout)
        return;
    int64_t cur = now_ms / interval_ms[window];
    const summary *r = &t->s[outcome][window == 0 ? 0 : ring_len[0]];
    for (int i = 0; i < ring_len[window]; i++)
        if (r[i].interval != NO_INTERVAL && r[i].interval <= cur &&
            r[i].interval > cur - ring_len[window])
            acc_summary(acc, &r[i], t->k);
}

static int by_count(const void *a, const void *b) {
    const pt_top_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    return c != 0 ? c : (int)x->len - (int)y->len;
}

size_t pt_top_acc_finish(pt_top_acc *acc) {
    size_t n = 0;
    for (size_t i = 0; i < acc->cap; i++) {
        if (acc->e[i].len == 0)
            continue;
        pt_top_entry e = acc->e[i];
        /* A summary that did not hold the key may still have seen up to
         * its smallest counter of it. */
        e.count += acc->min_sum - e.present_min;
        e.error = e.count - e.lower;
        acc->e[n++] = e;
    }
    if (n > 0)
        qsort(acc->e, n, sizeof(*acc->e), by_count);
    acc->n = n;
    return n;
}
