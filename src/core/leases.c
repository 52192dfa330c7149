/* leases.c — lease sets of the memory backend, and lease ids. */
#include "core/leases.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Drops the leases that expired (expiry <= now); order does not matter. */
static void expire(pt_leases *ls, int64_t now) {
    for (size_t i = 0; ls != NULL && i < ls->len;) {
        if (ls->items[i].expires_ms <= now)
            ls->items[i] = ls->items[--ls->len];
        else
            i++;
    }
}

static pt_lease *find(pt_leases *ls, const char *id) {
    for (size_t i = 0; ls != NULL && i < ls->len; i++)
        if (memcmp(ls->items[i].id, id, PT_LEASE_ID_LEN) == 0)
            return &ls->items[i];
    return NULL;
}

static pt_leases *add(pt_leases *ls, int64_t expires, const char *id) {
    size_t len = ls != NULL ? ls->len : 0, cap = ls != NULL ? ls->cap : 0;
    if (len == cap) {
        cap = cap == 0 ? 4 : cap * 2;
        pt_leases *grown = realloc(ls, sizeof(*grown) + cap * sizeof(grown->items[0]));
        if (grown == NULL)
            return NULL;
        grown->len = len;
        grown->cap = cap;
        ls = grown;
    }
    ls->items[ls->len].expires_ms = expires;
    memcpy(ls->items[ls->len].id, id, PT_LEASE_ID_LEN);
    ls->len++;
    return ls;
}

/* The acquire decision: remaining after it, reset = until the last lease
 * expires, retry = until the first one does. */
static void describe(const pt_leases *ls, const pt_lease_op *op, int64_t now, bool allowed,
                     porteiro_result *r) {
    int64_t first = INT64_MAX, last = now;
    size_t n = ls != NULL ? ls->len : 0;
    for (size_t i = 0; i < n; i++) {
        first = ls->items[i].expires_ms < first ? ls->items[i].expires_ms : first;
        last = ls->items[i].expires_ms > last ? ls->items[i].expires_ms : last;
    }
    r->allowed = allowed;
    r->limit = op->limit;
    r->remaining = op->limit > (int64_t)n ? op->limit - (int64_t)n : 0;
    r->reset_ms = last - now;
    r->retry_after_ms = allowed ? 0 : first - now;
}

static int64_t newest(const pt_leases *ls) {
    int64_t last = INT64_MIN;
    for (size_t i = 0; ls != NULL && i < ls->len; i++)
        last = ls->items[i].expires_ms > last ? ls->items[i].expires_ms : last;
    return last;
}

pt_leases *pt_leases_apply(pt_leases *ls, const pt_lease_op *op, int64_t now, pt_lease_out *out,
                           int64_t *expires_ms, bool *nomem) {
    *nomem = false;
    *out = (pt_lease_out){0};
    expire(ls, now);
    pt_lease *mine = find(ls, op->id);
    if (op->kind == PT_LEASE_ACQUIRE) {
        bool allowed = (ls != NULL ? (int64_t)ls->len : 0) < op->limit;
        if (allowed) {
            pt_leases *grown = add(ls, now + op->lease_ms, op->id);
            if (grown == NULL)
                *nomem = true;
            else
                ls = grown;
        }
        describe(ls, op, now, allowed && !*nomem, &out->result);
    } else if (mine != NULL) {
        out->found = true;
        if (op->kind == PT_LEASE_RENEW)
            mine->expires_ms = now + op->lease_ms;
        else
            *mine = ls->items[--ls->len];
    }
    *expires_ms = newest(ls);
    if (ls != NULL && ls->len == 0) {
        free(ls);
        ls = NULL;
    }
    return ls;
}

static int random_bytes(unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return 0;
    /* Old kernels: the device file. */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t r = read(fd, buf, n);
    close(fd);
    return r == (ssize_t)n ? 0 : -1;
}

int pt_lease_new_id(char out[PT_LEASE_ID_LEN + 1]) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[PT_LEASE_ID_LEN / 2];
    if (random_bytes(raw, sizeof(raw)) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[PT_LEASE_ID_LEN] = '\0';
    return 0;
}

bool pt_lease_id_valid(const char *id) {
    size_t n = 0;
    for (; id != NULL && id[n] != '\0'; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')) ||
            n >= PT_LEASE_ID_LEN)
            return false;
    return n == PT_LEASE_ID_LEN;
}
