/* test_spop.c — the SPOP 2.0 codec (daemon/spoe/spop.c), alone: varints at
 * every length boundary SPOE.txt lists, frames split from a byte stream,
 * HAPROXY-HELLO with each mandatory item missing or wrong (each answered by
 * its own status code), NOTIFY messages of every typed value, and the
 * agent's frames read back with the same readers, within max-frame-size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "spoe/spop.h"

/* ---- a HAProxy side, by hand -------------------------------------------- */

typedef struct frame_buf {
    uint8_t b[4096];
    size_t n;
} frame_buf;

static void raw(frame_buf *f, const void *p, size_t n) {
    assert_true(f->n + n <= sizeof(f->b));
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

static void byte(frame_buf *f, uint8_t c) {
    raw(f, &c, 1);
}

static void varint(frame_buf *f, uint64_t v) {
    uint8_t tmp[PD_SPOP_MAX_VARINT];
    size_t n = pd_spop_varint_put(v, tmp, sizeof(tmp));
    assert_true(n > 0);
    raw(f, tmp, n);
}

static void str(frame_buf *f, const char *s) {
    varint(f, strlen(s));
    raw(f, s, strlen(s));
}

/* The metadata of a frame (no length prefix: pd_spop_frame_parse's input). */
static void head(frame_buf *f, uint8_t type, uint32_t flags, uint64_t sid, uint64_t fid) {
    f->n = 0;
    byte(f, type);
    uint8_t fl[4] = {(uint8_t)(flags >> 24), (uint8_t)(flags >> 16), (uint8_t)(flags >> 8),
                     (uint8_t)flags};
    raw(f, fl, 4);
    varint(f, sid);
    varint(f, fid);
}

static void kv_str(frame_buf *f, const char *name, const char *v) {
    str(f, name);
    byte(f, PD_SPOP_STRING);
    str(f, v);
}

static void kv_uint(frame_buf *f, const char *name, uint8_t type, uint64_t v) {
    str(f, name);
    byte(f, type);
    varint(f, v);
}

enum { NO_VERSIONS = 1, NO_SIZE = 2, NO_CAPS = 4, HEALTHCHECK = 8 };

/* A HAPROXY-HELLO as HAProxy 2.6 writes it. */
static void hello(frame_buf *f, uint32_t flags, uint64_t sid, const char *versions,
                  uint64_t max_frame, int leave_out) {
    head(f, PD_SPOP_HAPROXY_HELLO, flags, sid, 0);
    if (!(leave_out & NO_VERSIONS))
        kv_str(f, "supported-versions", versions);
    if (!(leave_out & NO_SIZE))
        kv_uint(f, "max-frame-size", PD_SPOP_UINT32, max_frame);
    if (!(leave_out & NO_CAPS))
        kv_str(f, "capabilities", "pipelining,async");
    kv_str(f, "engine-id", "0C5A6E2D-8E9F-4C2B");
    if (leave_out & HEALTHCHECK) {
        str(f, "healthcheck");
        byte(f, PD_SPOP_BOOL | 0x10);
    }
}

static pd_spop_status hello_status(const frame_buf *f, pd_spop_hello *h) {
    pd_spop_frame fr;
    assert_int_equal(pd_spop_frame_parse(f->b, f->n, &fr), PD_SPOP_NORMAL);
    return pd_spop_hello_parse(&fr, h);
}

/* ---- varints -------------------------------------------------------------- */

static void varint_boundaries(void **state) {
    (void)state;
    /* SPOE.txt's table: the value ranges of 1, 2, 3, 4 and 5 bytes. */
    static const struct {
        uint64_t v;
        size_t len;
    } cases[] = {{0, 1},          {239, 1},           {240, 2},           {2287, 2},
                 {2288, 3},       {264431, 3},        {264432, 4},        {33818863, 4},
                 {33818864, 5},   {4328786159ULL, 5}, {4328786160ULL, 6}, {UINT32_MAX, 5},
                 {UINT64_MAX, 10}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t out[PD_SPOP_MAX_VARINT];
        size_t n = pd_spop_varint_put(cases[i].v, out, sizeof(out));
        assert_int_equal(n, cases[i].len);
        const uint8_t *p = out;
        uint64_t back = 0;
        assert_int_equal(pd_spop_varint_get(&p, out + n, &back), 0);
        assert_true(back == cases[i].v);
        assert_ptr_equal(p, out + n);
        /* One byte short: cut, never read past the end. */
        p = out;
        if (n > 1)
            assert_int_equal(pd_spop_varint_get(&p, out + n - 1, &back), -1);
        /* No room for it: nothing claimed written. */
        assert_int_equal(pd_spop_varint_put(cases[i].v, out, n - 1), 0);
    }
    /* The bytes themselves: 240 is F0 00, 2287 is FF 7F. */
    uint8_t out[PD_SPOP_MAX_VARINT];
    assert_int_equal(pd_spop_varint_put(240, out, sizeof(out)), 2);
    assert_int_equal(out[0], 0xf0);
    assert_int_equal(out[1], 0x00);
    assert_int_equal(pd_spop_varint_put(2287, out, sizeof(out)), 2);
    assert_int_equal(out[0], 0xff);
    assert_int_equal(out[1], 0x7f);
}

static void varint_overflow(void **state) {
    (void)state;
    /* Continuation bytes beyond 64 bits: refused, not wrapped. */
    uint8_t many[16];
    memset(many, 0xff, sizeof(many));
    many[15] = 0x01;
    const uint8_t *p = many;
    uint64_t v;
    assert_int_equal(pd_spop_varint_get(&p, many + sizeof(many), &v), -1);
    /* UINT64_MAX's last byte one higher overflows. */
    uint8_t out[PD_SPOP_MAX_VARINT];
    size_t n = pd_spop_varint_put(UINT64_MAX, out, sizeof(out));
    out[n - 1]++;
    p = out;
    assert_int_equal(pd_spop_varint_get(&p, out + n, &v), -1);
    p = out;
    assert_int_equal(pd_spop_varint_get(&p, out, &v), -1); /* empty */
}

/* ---- frames ------------------------------------------------------------- */

static void split_frames(void **state) {
    (void)state;
    uint8_t buf[16] = {0, 0, 0, 9, 3, 0, 0, 0, 1, 1, 1};
    size_t n = 0;
    assert_int_equal(pd_spop_split(buf, 3, 100, &n), PD_SPOP_NEED_MORE);
    assert_int_equal(pd_spop_split(buf, 11, 100, &n), PD_SPOP_NEED_MORE);
    assert_int_equal(n, 9);
    assert_int_equal(pd_spop_split(buf, 13, 100, &n), PD_SPOP_WHOLE);
    assert_int_equal(pd_spop_split(buf, 13, 8, &n), PD_SPOP_OVERSIZED);
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    assert_int_equal(pd_spop_split(huge, 4, PD_SPOP_MAX_FRAME, &n), PD_SPOP_OVERSIZED);
    /* Metadata: too short, and ids cut short. */
    pd_spop_frame f;
    assert_int_equal(pd_spop_frame_parse(buf + 4, 6, &f), PD_SPOP_INVALID);
    uint8_t cut[7] = {3, 0, 0, 0, 1, 0xf5, 0xf5};
    assert_int_equal(pd_spop_frame_parse(cut, sizeof(cut), &f), PD_SPOP_INVALID);
    assert_int_equal(pd_spop_frame_parse(buf + 4, 9, &f), PD_SPOP_NORMAL);
    assert_int_equal(f.type, PD_SPOP_NOTIFY);
    assert_int_equal(f.flags, PD_SPOP_FIN);
    assert_int_equal(f.stream_id, 1);
    assert_int_equal(f.frame_id, 1);
    assert_int_equal(f.payload_len, 2);
}

/* ---- HAPROXY-HELLO ---------------------------------------------------------- */

static void hello_as_haproxy_sends_it(void **state) {
    (void)state;
    frame_buf f;
    pd_spop_hello h;
    hello(&f, PD_SPOP_FIN, 0, "2.0", 16380, 0);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NORMAL);
    assert_int_equal(h.max_frame_size, 16380);
    assert_true(h.pipelining);
    assert_true(h.async);
    assert_false(h.fragmentation);
    assert_false(h.healthcheck);
    assert_int_equal(h.engine_id_len, 18);
    hello(&f, PD_SPOP_FIN, 0, " 3.0 , 2.1 ", 256, HEALTHCHECK);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NORMAL);
    assert_true(h.healthcheck);
    assert_int_equal(h.max_frame_size, 256);
    /* max-frame-size as any integer type */
    head(&f, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    kv_str(&f, "capabilities", "");
    kv_uint(&f, "max-frame-size", PD_SPOP_INT64, 5000);
    kv_str(&f, "x-unknown", "skipped");
    kv_str(&f, "supported-versions", "2.0");
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NORMAL);
    assert_int_equal(h.max_frame_size, 5000);
    assert_false(h.pipelining);
}

static void hello_refused_with_its_status(void **state) {
    (void)state;
    frame_buf f;
    pd_spop_hello h;
    hello(&f, PD_SPOP_FIN, 0, "2.0", 16380, NO_VERSIONS);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NO_VERSION);
    hello(&f, PD_SPOP_FIN, 0, "2.0", 16380, NO_SIZE);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NO_FRAME_SIZE);
    hello(&f, PD_SPOP_FIN, 0, "2.0", 16380, NO_CAPS);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_NO_CAPABILITIES);
    hello(&f, PD_SPOP_FIN, 0, "1.0, 3.0, 20.0, 2., 2.x", 16380, 0);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_BAD_VERSION);
    hello(&f, PD_SPOP_FIN, 0, "2.0", 255, 0);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_BAD_FRAME_SIZE);
    hello(&f, 0, 0, "2.0", 16380, 0); /* no FIN: a fragment */
    assert_int_equal(hello_status(&f, &h), PD_SPOP_FRAGMENTED);
    hello(&f, PD_SPOP_FIN, 7, "2.0", 16380, 0); /* a stream id */
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
    /* A value of the wrong type, an empty name, a reserved type, a cut string. */
    head(&f, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    kv_str(&f, "max-frame-size", "16380");
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
    head(&f, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    kv_str(&f, "", "x");
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
    head(&f, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    str(&f, "x");
    byte(&f, 12);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
    hello(&f, PD_SPOP_FIN, 0, "2.0", 16380, 0);
    f.n -= 3;
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
    head(&f, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    str(&f, "healthcheck");
    byte(&f, PD_SPOP_STRING);
    assert_int_equal(hello_status(&f, &h), PD_SPOP_INVALID);
}

/* ---- NOTIFY ------------------------------------------------------------------ */

static void notify_messages_and_values(void **state) {
    (void)state;
    frame_buf f;
    head(&f, PD_SPOP_NOTIFY, PD_SPOP_FIN, 42, 7);
    str(&f, "check");
    byte(&f, 9);
    kv_str(&f, "policy", "api");
    str(&f, "key");
    byte(&f, PD_SPOP_IPV4);
    raw(&f, "\xc0\x00\x02\x07", 4);
    kv_uint(&f, "cost", PD_SPOP_INT64, 3);
    str(&f, "six");
    byte(&f, PD_SPOP_IPV6);
    raw(&f, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01", 16);
    str(&f, "t");
    byte(&f, PD_SPOP_BOOL | 0x10);
    str(&f, "nothing");
    byte(&f, PD_SPOP_NULL);
    str(&f, "bin");
    byte(&f, PD_SPOP_BINARY);
    varint(&f, 3);
    raw(&f, "\0\1\2", 3);
    kv_uint(&f, "neg", PD_SPOP_INT32, (uint64_t)(int64_t)-5);
    str(&f, ""); /* an argument without a name */
    byte(&f, PD_SPOP_UINT64);
    varint(&f, 1ULL << 40);
    str(&f, "other");
    byte(&f, 0);

    pd_spop_frame fr;
    assert_int_equal(pd_spop_frame_parse(f.b, f.n, &fr), PD_SPOP_NORMAL);
    assert_int_equal(fr.stream_id, 42);
    assert_int_equal(fr.frame_id, 7);
    assert_int_equal(pd_spop_notify_check(fr.payload, fr.payload_len), 0);
    pd_spop_reader r = {fr.payload, fr.payload + fr.payload_len};
    pd_spop_message m;
    assert_int_equal(pd_spop_next_message(&r, &m), 1);
    assert_int_equal(m.name_len, 5);
    assert_memory_equal(m.name, "check", 5);
    const uint8_t *name;
    size_t nlen;
    pd_spop_value v;
    static const pd_spop_type want[] = {PD_SPOP_STRING, PD_SPOP_IPV4,  PD_SPOP_INT64,
                                        PD_SPOP_IPV6,   PD_SPOP_BOOL,  PD_SPOP_NULL,
                                        PD_SPOP_BINARY, PD_SPOP_INT32, PD_SPOP_UINT64};
    for (size_t i = 0; i < 9; i++) {
        assert_int_equal(pd_spop_next_arg(&m, &name, &nlen, &v), 1);
        assert_int_equal(v.type, want[i]);
    }
    assert_int_equal(nlen, 0);
    assert_true(v.number == 1ULL << 40);
    assert_int_equal(pd_spop_next_arg(&m, &name, &nlen, &v), 0);
    assert_int_equal(pd_spop_next_message(&r, &m), 1);
    assert_int_equal(m.nargs, 0);
    assert_int_equal(pd_spop_next_message(&r, &m), 0);

    /* More arguments announced than sent; a reserved type; a name cut short. */
    head(&f, PD_SPOP_NOTIFY, PD_SPOP_FIN, 1, 1);
    str(&f, "check");
    byte(&f, 2);
    kv_str(&f, "policy", "api");
    assert_int_equal(pd_spop_frame_parse(f.b, f.n, &fr), PD_SPOP_NORMAL);
    assert_int_equal(pd_spop_notify_check(fr.payload, fr.payload_len), -1);
    head(&f, PD_SPOP_NOTIFY, PD_SPOP_FIN, 1, 1);
    str(&f, "check");
    byte(&f, 1);
    str(&f, "x");
    byte(&f, 15);
    assert_int_equal(pd_spop_frame_parse(f.b, f.n, &fr), PD_SPOP_NORMAL);
    assert_int_equal(pd_spop_notify_check(fr.payload, fr.payload_len), -1);
    head(&f, PD_SPOP_NOTIFY, PD_SPOP_FIN, 1, 1);
    varint(&f, 300);
    raw(&f, "check", 5);
    assert_int_equal(pd_spop_frame_parse(f.b, f.n, &fr), PD_SPOP_NORMAL);
    assert_int_equal(pd_spop_notify_check(fr.payload, fr.payload_len), -1);
    head(&f, PD_SPOP_NOTIFY, PD_SPOP_FIN, 1, 1);
    str(&f, "check"); /* NB-ARGS missing */
    assert_int_equal(pd_spop_frame_parse(f.b, f.n, &fr), PD_SPOP_NORMAL);
    assert_int_equal(pd_spop_notify_check(fr.payload, fr.payload_len), -1);
}

/* ---- what the agent writes ---------------------------------------------------- */

/* Reads the frame at buf (with its length) back: its metadata. */
static void read_back(const uint8_t *buf, size_t n, pd_spop_frame *f) {
    size_t len;
    assert_int_equal(pd_spop_split(buf, n, PD_SPOP_MAX_FRAME, &len), PD_SPOP_WHOLE);
    assert_int_equal(len + 4, n);
    assert_int_equal(pd_spop_frame_parse(buf + 4, len, f), PD_SPOP_NORMAL);
    assert_int_equal(f->flags, PD_SPOP_FIN);
}

static void agent_hello_and_disconnect(void **state) {
    (void)state;
    uint8_t buf[512];
    pd_spop_frame f;
    size_t n = pd_spop_agent_hello(buf, sizeof(buf), 16380);
    read_back(buf, n, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_HELLO);
    /* HAProxy checks the two id bytes themselves: 0 and 0. */
    assert_int_equal(buf[9], 0);
    assert_int_equal(buf[10], 0);
    pd_spop_reader r = {f.payload, f.payload + f.payload_len};
    const char *names[] = {"version", "max-frame-size", "capabilities"};
    for (int i = 0; i < 3; i++) {
        const uint8_t *name;
        size_t len;
        pd_spop_value v;
        assert_int_equal(pd_spop_get_string(&r, &name, &len), 0);
        assert_int_equal(len, strlen(names[i]));
        assert_memory_equal(name, names[i], len);
        assert_int_equal(pd_spop_get_value(&r, &v), 0);
        if (i == 0)
            assert_memory_equal(v.data, "2.0", 3);
        if (i == 1)
            assert_true(v.type == PD_SPOP_UINT32 && v.number == 16380);
        if (i == 2)
            assert_true(v.len == 10 && memcmp(v.data, "pipelining", 10) == 0);
    }
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(pd_spop_agent_hello(buf, 20, 16380), 0); /* no room */

    n = pd_spop_agent_disconnect(buf, sizeof(buf), PD_SPOP_TOO_BIG);
    read_back(buf, n, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_DISCONNECT);
    uint32_t code;
    const uint8_t *msg;
    size_t mlen;
    /* Read with the HAProxy-side reader: the same KV layout. */
    assert_int_equal(pd_spop_disconnect_parse(&f, &code, &msg, &mlen), PD_SPOP_NORMAL);
    assert_int_equal(code, PD_SPOP_TOO_BIG);
    assert_int_equal(mlen, strlen("frame is too big"));
}

/* Reads SET-VAR actions back: the count, and the last one's name and value. */
static int read_actions(const pd_spop_frame *f, char *last_name, pd_spop_value *last) {
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    int n = 0;
    while (r.p < r.end) {
        assert_int_equal(*r.p++, 1); /* SET-VAR */
        assert_int_equal(*r.p++, 3); /* 3 arguments */
        assert_int_equal(*r.p++, PD_SPOP_SCOPE_TXN);
        const uint8_t *name;
        size_t len;
        assert_int_equal(pd_spop_get_string(&r, &name, &len), 0);
        memcpy(last_name, name, len);
        last_name[len] = '\0';
        assert_int_equal(pd_spop_get_value(&r, last), 0);
        n++;
    }
    return n;
}

static void ack_within_max_frame_size(void **state) {
    (void)state;
    uint8_t buf[2048];
    char big[600], name[64];
    memset(big, 'x', sizeof(big));
    pd_spop_writer w;
    pd_spop_frame f;
    pd_spop_value v;
    /* Ids of every size come back as sent. */
    pd_spop_begin(&w, buf, sizeof(buf), 16380, PD_SPOP_ACK, 4328786160ULL, 2288);
    assert_true(pd_spop_set_var_int(&w, PD_SPOP_SCOPE_TXN, "allowed", 1));
    assert_true(pd_spop_set_var_int(&w, PD_SPOP_SCOPE_TXN, "reset_ms", -1));
    assert_true(pd_spop_set_var_string(&w, PD_SPOP_SCOPE_TXN, "ratelimit", "\"api\";r=4;t=60", 14));
    size_t n = pd_spop_end(&w);
    read_back(buf, n, &f);
    assert_int_equal(f.type, PD_SPOP_ACK);
    assert_true(f.stream_id == 4328786160ULL && f.frame_id == 2288);
    assert_int_equal(read_actions(&f, name, &v), 3);
    assert_string_equal(name, "ratelimit");
    assert_true(v.len == 14 && memcmp(v.data, "\"api\";r=4;t=60", 14) == 0);

    /* max-frame-size 256: a string too large is left out, whole, and the
     * actions after it still go in. */
    pd_spop_begin(&w, buf, sizeof(buf), 256, PD_SPOP_ACK, 1, 1);
    assert_true(pd_spop_set_var_int(&w, PD_SPOP_SCOPE_TXN, "allowed", 0));
    assert_false(pd_spop_set_var_string(&w, PD_SPOP_SCOPE_TXN, "ratelimit_policy", big, 300));
    assert_true(pd_spop_set_var_int(&w, PD_SPOP_SCOPE_TXN, "retry_after_ms", 1200));
    n = pd_spop_end(&w);
    assert_true(n > 0 && n - 4 <= 256);
    read_back(buf, n, &f);
    assert_int_equal(read_actions(&f, name, &v), 2);
    assert_string_equal(name, "retry_after_ms");
    assert_true(v.type == PD_SPOP_INT64 && v.number == 1200);
    /* Exactly at the limit fits; one byte more does not. */
    pd_spop_begin(&w, buf, sizeof(buf), 256, PD_SPOP_ACK, 1, 1);
    size_t head_len = w.len - 4, fixed = 3 + 2 + 1 + 2; /* action, name "s", type, 2-byte length */
    size_t fits = 256 - head_len - fixed;
    assert_true(pd_spop_set_var_string(&w, PD_SPOP_SCOPE_TXN, "s", big, fits));
    assert_int_equal(pd_spop_end(&w), 4 + 256);
    pd_spop_begin(&w, buf, sizeof(buf), 256, PD_SPOP_ACK, 1, 1);
    assert_false(pd_spop_set_var_string(&w, PD_SPOP_SCOPE_TXN, "s", big, fits + 1));
    assert_int_equal(pd_spop_end(&w), 4 + head_len);
    /* A buffer smaller than the frame: refused, never written past. */
    pd_spop_begin(&w, buf, 12, 16380, PD_SPOP_ACK, 1, 1);
    assert_false(pd_spop_set_var_string(&w, PD_SPOP_SCOPE_TXN, "allowed", "1", 1));
    assert_true(pd_spop_end(&w) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(varint_boundaries),
        cmocka_unit_test(varint_overflow),
        cmocka_unit_test(split_frames),
        cmocka_unit_test(hello_as_haproxy_sends_it),
        cmocka_unit_test(hello_refused_with_its_status),
        cmocka_unit_test(notify_messages_and_values),
        cmocka_unit_test(agent_hello_and_disconnect),
        cmocka_unit_test(ack_within_max_frame_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
