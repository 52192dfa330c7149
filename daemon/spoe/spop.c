/* spop.c — SPOP 2.0 frames as bytes (spop.h). Written from HAProxy's
 * doc/SPOE.txt, section 3; every length is checked against the bytes left
 * before it is used. */
#include "spop.h"

#include <string.h>

const char *pd_spop_status_text(pd_spop_status st) {
    switch (st) {
        case PD_SPOP_NORMAL: return "normal";
        case PD_SPOP_IO: return "I/O error";
        case PD_SPOP_TIMEOUT: return "a timeout occurred";
        case PD_SPOP_TOO_BIG: return "frame is too big";
        case PD_SPOP_INVALID: return "invalid frame received";
        case PD_SPOP_NO_VERSION: return "version value not found";
        case PD_SPOP_NO_FRAME_SIZE: return "max-frame-size value not found";
        case PD_SPOP_NO_CAPABILITIES: return "capabilities value not found";
        case PD_SPOP_BAD_VERSION: return "unsupported version";
        case PD_SPOP_BAD_FRAME_SIZE: return "max-frame-size too big or too small";
        case PD_SPOP_FRAGMENTED: return "payload fragmentation is not supported";
        case PD_SPOP_INTERLACED: return "invalid interlaced frames";
        case PD_SPOP_FRAME_ID: return "frame-id not found";
        case PD_SPOP_RESOURCE: return "resource allocation error";
        default: return "an unknown error occurred";
    }
}

/* ---- varints ------------------------------------------------------------ */

size_t pd_spop_varint_put(uint64_t v, uint8_t *out, size_t cap) {
    size_t n = 0;
    if (cap == 0)
        return 0;
    if (v < 240) {
        out[0] = (uint8_t)v;
        return 1;
    }
    out[n++] = (uint8_t)(v | 240);
    v = (v - 240) >> 4;
    while (v >= 128) {
        if (n == cap)
            return 0;
        out[n++] = (uint8_t)(v | 128);
        v = (v - 128) >> 7;
    }
    if (n == cap)
        return 0;
    out[n++] = (uint8_t)v;
    return n;
}

int pd_spop_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    const uint8_t *q = *p;
    if (q >= end)
        return -1;
    uint64_t x = *q++;
    if (x >= 240) {
        unsigned shift = 4;
        uint8_t b;
        do {
            if (q >= end || shift >= 64)
                return -1;
            b = *q++;
            /* b << shift must fit, and so must the sum */
            if (shift > 56 && (b >> (64 - shift)) != 0)
                return -1;
            uint64_t add = (uint64_t)b << shift;
            if (x + add < x)
                return -1;
            x += add;
            shift += 7;
        } while (b >= 128);
    }
    *p = q;
    *v = x;
    return 0;
}

/* ---- frames ------------------------------------------------------------- */

pd_spop_split_result pd_spop_split(const uint8_t *buf, size_t len, size_t max_frame,
                                   size_t *frame_len) {
    if (len < 4)
        return PD_SPOP_NEED_MORE;
    size_t n = (size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3];
    if (n > max_frame)
        return PD_SPOP_OVERSIZED;
    *frame_len = n;
    return len - 4 >= n ? PD_SPOP_WHOLE : PD_SPOP_NEED_MORE;
}

pd_spop_status pd_spop_frame_parse(const uint8_t *frame, size_t len, pd_spop_frame *out) {
    const uint8_t *p = frame, *end = frame + len;
    if (len < PD_SPOP_FRAME_HEADER)
        return PD_SPOP_INVALID;
    out->type = *p++;
    out->flags = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    p += 4;
    if (pd_spop_varint_get(&p, end, &out->stream_id) != 0 ||
        pd_spop_varint_get(&p, end, &out->frame_id) != 0)
        return PD_SPOP_INVALID;
    out->payload = p;
    out->payload_len = (size_t)(end - p);
    return PD_SPOP_NORMAL;
}

/* ---- reading payloads ---------------------------------------------------- */

int pd_spop_get_string(pd_spop_reader *r, const uint8_t **s, size_t *len) {
    uint64_t n;
    const uint8_t *p = r->p;
    if (pd_spop_varint_get(&p, r->end, &n) != 0 || n > (uint64_t)(r->end - p))
        return -1;
    *s = p;
    *len = (size_t)n;
    r->p = p + n;
    return 0;
}

int pd_spop_get_value(pd_spop_reader *r, pd_spop_value *v) {
    if (r->p >= r->end)
        return -1;
    uint8_t byte = *r->p;
    pd_spop_reader at = {r->p + 1, r->end};
    *v = (pd_spop_value){.type = (pd_spop_type)(byte & 0x0f)};
    switch (byte & 0x0f) {
        case PD_SPOP_NULL: break;
        case PD_SPOP_BOOL: v->boolean = (byte & 0x10) != 0; break;
        case PD_SPOP_INT32:
        case PD_SPOP_UINT32:
        case PD_SPOP_INT64:
        case PD_SPOP_UINT64:
            if (pd_spop_varint_get(&at.p, at.end, &v->number) != 0)
                return -1;
            break;
        case PD_SPOP_IPV4:
        case PD_SPOP_IPV6:
            v->len = (byte & 0x0f) == PD_SPOP_IPV4 ? 4 : 16;
            if ((size_t)(at.end - at.p) < v->len)
                return -1;
            v->data = at.p;
            at.p += v->len;
            break;
        case PD_SPOP_STRING:
        case PD_SPOP_BINARY:
            if (pd_spop_get_string(&at, &v->data, &v->len) != 0)
                return -1;
            break;
        default: return -1; /* 10-15: reserved */
    }
    r->p = at.p;
    return 0;
}

static bool is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* A comma-separated list, item by item (each trimmed of spaces). */
typedef struct list_walk {
    const uint8_t *p, *end;
    bool done;
} list_walk;

static bool next_item(list_walk *l, const uint8_t **item, size_t *len) {
    if (l->done)
        return false;
    const uint8_t *s = l->p, *comma = memchr(s, ',', (size_t)(l->end - s));
    const uint8_t *e = comma != NULL ? comma : l->end;
    l->done = comma == NULL;
    l->p = comma != NULL ? comma + 1 : l->end;
    while (s < e && is_space(*s))
        s++;
    while (e > s && is_space(e[-1]))
        e--;
    *item = s;
    *len = (size_t)(e - s);
    return true;
}

/* "2.0", "2.5": a version of major 2, the one this agent speaks (a major
 * version announced includes all its minor ones). */
static bool speaks_2(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] == '0')
        i++;
    if (i + 2 > n || s[i] != '2' || s[i + 1] != '.' || i + 2 == n)
        return false;
    for (i += 2; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static bool same(const uint8_t *s, size_t n, const char *word) {
    return n == strlen(word) && memcmp(s, word, n) == 0;
}

static bool is_integer(pd_spop_type t) {
    return t == PD_SPOP_INT32 || t == PD_SPOP_UINT32 || t == PD_SPOP_INT64 || t == PD_SPOP_UINT64;
}

/* HELLO and DISCONNECT are whole frames on stream 0, frame 0. */
static pd_spop_status check_control(const pd_spop_frame *f) {
    if (!(f->flags & PD_SPOP_FIN))
        return PD_SPOP_FRAGMENTED;
    if (f->stream_id != 0 || f->frame_id != 0)
        return PD_SPOP_INVALID;
    return PD_SPOP_NORMAL;
}

pd_spop_status pd_spop_hello_parse(const pd_spop_frame *f, pd_spop_hello *out) {
    *out = (pd_spop_hello){0};
    pd_spop_status st = check_control(f);
    if (st != PD_SPOP_NORMAL)
        return st;
    bool version = false, size = false, caps = false, version_ok = false;
    uint64_t max = 0;
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    while (r.p < r.end) {
        const uint8_t *name, *item;
        size_t name_len, item_len;
        pd_spop_value v;
        if (pd_spop_get_string(&r, &name, &name_len) != 0 || name_len == 0 ||
            pd_spop_get_value(&r, &v) != 0)
            return PD_SPOP_INVALID;
        if (same(name, name_len, "supported-versions")) {
            if (v.type != PD_SPOP_STRING)
                return PD_SPOP_INVALID;
            version = true;
            list_walk l = {v.data, v.data + v.len, false};
            while (next_item(&l, &item, &item_len))
                version_ok = version_ok || speaks_2(item, item_len);
        } else if (same(name, name_len, "max-frame-size")) {
            if (!is_integer(v.type))
                return PD_SPOP_INVALID;
            size = true;
            max = v.number;
        } else if (same(name, name_len, "capabilities")) {
            if (v.type != PD_SPOP_STRING)
                return PD_SPOP_INVALID;
            caps = true;
            list_walk l = {v.data, v.data + v.len, false};
            while (next_item(&l, &item, &item_len)) {
                out->pipelining = out->pipelining || same(item, item_len, "pipelining");
                out->async = out->async || same(item, item_len, "async");
                out->fragmentation = out->fragmentation || same(item, item_len, "fragmentation");
            }
        } else if (same(name, name_len, "healthcheck")) {
            if (v.type != PD_SPOP_BOOL)
                return PD_SPOP_INVALID;
            out->healthcheck = v.boolean;
        } else if (same(name, name_len, "engine-id")) {
            if (v.type != PD_SPOP_STRING)
                return PD_SPOP_INVALID;
            out->engine_id = v.data;
            out->engine_id_len = v.len;
        } /* any other item: skipped (its value parsed above) */
    }
    if (!version)
        return PD_SPOP_NO_VERSION;
    if (!size)
        return PD_SPOP_NO_FRAME_SIZE;
    if (!caps)
        return PD_SPOP_NO_CAPABILITIES;
    if (!version_ok)
        return PD_SPOP_BAD_VERSION;
    if (max < PD_SPOP_MIN_FRAME)
        return PD_SPOP_BAD_FRAME_SIZE;
    out->max_frame_size = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max;
    return PD_SPOP_NORMAL;
}

pd_spop_status pd_spop_disconnect_parse(const pd_spop_frame *f, uint32_t *code,
                                        const uint8_t **message, size_t *message_len) {
    *code = PD_SPOP_UNKNOWN;
    *message = NULL;
    *message_len = 0;
    if (check_control(f) != PD_SPOP_NORMAL)
        return PD_SPOP_INVALID;
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    while (r.p < r.end) {
        const uint8_t *name;
        size_t name_len;
        pd_spop_value v;
        if (pd_spop_get_string(&r, &name, &name_len) != 0 || pd_spop_get_value(&r, &v) != 0)
            return PD_SPOP_INVALID;
        if (same(name, name_len, "status-code") && is_integer(v.type))
            *code = v.number > UINT32_MAX ? UINT32_MAX : (uint32_t)v.number;
        else if (same(name, name_len, "message") && v.type == PD_SPOP_STRING) {
            *message = v.data;
            *message_len = v.len;
        }
    }
    return PD_SPOP_NORMAL;
}

int pd_spop_next_message(pd_spop_reader *r, pd_spop_message *m) {
    if (r->p >= r->end)
        return 0;
    pd_spop_reader at = *r;
    if (pd_spop_get_string(&at, &m->name, &m->name_len) != 0 || at.p >= at.end)
        return -1;
    m->nargs = *at.p++;
    m->args = at;
    /* Skip the arguments to find the next message. */
    pd_spop_message skip = *m;
    const uint8_t *name;
    size_t name_len;
    pd_spop_value v;
    int rc;
    while ((rc = pd_spop_next_arg(&skip, &name, &name_len, &v)) == 1)
        ;
    if (rc < 0)
        return -1;
    m->args.end = skip.args.p; /* this message's arguments only */
    r->p = skip.args.p;
    return 1;
}

int pd_spop_next_arg(pd_spop_message *m, const uint8_t **name, size_t *name_len, pd_spop_value *v) {
    if (m->nargs == 0)
        return 0;
    if (pd_spop_get_string(&m->args, name, name_len) != 0 || pd_spop_get_value(&m->args, v) != 0)
        return -1;
    m->nargs--;
    return 1;
}

int pd_spop_notify_check(const uint8_t *payload, size_t len) {
    pd_spop_reader r = {payload, payload + len};
    pd_spop_message m;
    int rc;
    while ((rc = pd_spop_next_message(&r, &m)) == 1)
        ;
    return rc;
}

/* ---- writing frames ------------------------------------------------------ */

/* Room for n more bytes, within cap and within max_frame bytes of frame. */
static bool room(pd_spop_writer *w, size_t n) {
    if (w->failed || n > w->cap - w->len || w->len + n - 4 > w->max_frame)
        w->failed = true;
    return !w->failed;
}

static void put(pd_spop_writer *w, const void *data, size_t n) {
    if (room(w, n)) {
        memcpy(w->buf + w->len, data, n);
        w->len += n;
    }
}

static void put_byte(pd_spop_writer *w, uint8_t b) {
    put(w, &b, 1);
}

static void put_varint(pd_spop_writer *w, uint64_t v) {
    uint8_t tmp[PD_SPOP_MAX_VARINT];
    put(w, tmp, pd_spop_varint_put(v, tmp, sizeof(tmp)));
}

static void put_string(pd_spop_writer *w, const char *s, size_t len) {
    put_varint(w, len);
    put(w, s, len);
}

void pd_spop_begin(pd_spop_writer *w, uint8_t *buf, size_t cap, size_t max_frame, uint8_t type,
                   uint64_t stream_id, uint64_t frame_id) {
    *w = (pd_spop_writer){.buf = buf, .cap = cap, .max_frame = max_frame};
    static const uint8_t flags[4] = {0, 0, 0, PD_SPOP_FIN};
    if (cap < 4) {
        w->failed = true;
        return;
    }
    w->len = 4; /* the length, written by pd_spop_end */
    put_byte(w, type);
    put(w, flags, 4);
    put_varint(w, stream_id);
    put_varint(w, frame_id);
}

size_t pd_spop_end(pd_spop_writer *w) {
    if (w->failed)
        return 0;
    size_t n = w->len - 4;
    w->buf[0] = (uint8_t)(n >> 24);
    w->buf[1] = (uint8_t)(n >> 16);
    w->buf[2] = (uint8_t)(n >> 8);
    w->buf[3] = (uint8_t)n;
    return w->len;
}

void pd_spop_put_kv_string(pd_spop_writer *w, const char *name, const char *s, size_t len) {
    put_string(w, name, strlen(name));
    put_byte(w, PD_SPOP_STRING);
    put_string(w, s, len);
}

void pd_spop_put_kv_uint32(pd_spop_writer *w, const char *name, uint32_t v) {
    put_string(w, name, strlen(name));
    put_byte(w, PD_SPOP_UINT32);
    put_varint(w, v);
}

/* SET-VAR (1) with its 3 arguments: scope, name, then the value's bytes. */
static void set_var_head(pd_spop_writer *w, int scope, const char *name) {
    put_byte(w, 1);
    put_byte(w, 3);
    put_byte(w, (uint8_t)scope);
    put_string(w, name, strlen(name));
}

/* An action is written whole or not at all. */
static bool keep_or_undo(pd_spop_writer *w, size_t before) {
    if (!w->failed)
        return true;
    w->failed = false;
    w->len = before;
    return false;
}

bool pd_spop_set_var_int(pd_spop_writer *w, int scope, const char *name, int64_t v) {
    if (w->failed)
        return false;
    size_t before = w->len;
    set_var_head(w, scope, name);
    put_byte(w, PD_SPOP_INT64);
    put_varint(w, (uint64_t)v);
    return keep_or_undo(w, before);
}

bool pd_spop_set_var_string(pd_spop_writer *w, int scope, const char *name, const char *s,
                            size_t len) {
    if (w->failed)
        return false;
    size_t before = w->len;
    set_var_head(w, scope, name);
    put_byte(w, PD_SPOP_STRING);
    put_string(w, s, len);
    return keep_or_undo(w, before);
}

size_t pd_spop_agent_hello(uint8_t *buf, size_t cap, uint32_t max_frame) {
    pd_spop_writer w;
    pd_spop_begin(&w, buf, cap, max_frame, PD_SPOP_AGENT_HELLO, 0, 0);
    pd_spop_put_kv_string(&w, "version", PD_SPOP_VERSION, strlen(PD_SPOP_VERSION));
    pd_spop_put_kv_uint32(&w, "max-frame-size", max_frame);
    pd_spop_put_kv_string(&w, "capabilities", "pipelining", 10);
    return pd_spop_end(&w);
}

size_t pd_spop_agent_disconnect(uint8_t *buf, size_t cap, pd_spop_status st) {
    pd_spop_writer w;
    const char *text = pd_spop_status_text(st);
    pd_spop_begin(&w, buf, cap, PD_SPOP_MIN_FRAME, PD_SPOP_AGENT_DISCONNECT, 0, 0);
    pd_spop_put_kv_uint32(&w, "status-code", (uint32_t)st);
    pd_spop_put_kv_string(&w, "message", text, strlen(text));
    return pd_spop_end(&w);
}
