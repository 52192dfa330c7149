/* spop_client.c — a HAProxy side of SPOP by hand (spop_client.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "spop_client.h"

void spop_put(spop_wire *w, const void *p, size_t n) {
    assert_true(w->n + n <= sizeof(w->b));
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

void spop_put_varint(spop_wire *w, uint64_t v) {
    uint8_t tmp[PD_SPOP_MAX_VARINT];
    size_t n = pd_spop_varint_put(v, tmp, sizeof(tmp));
    assert_true(n > 0);
    spop_put(w, tmp, n);
}

void spop_put_bytes(spop_wire *w, const void *p, size_t n) {
    spop_put_varint(w, n);
    spop_put(w, p, n);
}

void spop_put_str(spop_wire *w, const char *s) {
    spop_put_bytes(w, s, strlen(s));
}

size_t spop_begin_frame(spop_wire *w, uint8_t type, uint32_t flags, uint64_t sid, uint64_t fid) {
    size_t at = w->n;
    uint8_t head[5] = {0, 0, 0, 0, type};
    spop_put(w, head, 5);
    uint8_t fl[4] = {(uint8_t)(flags >> 24), (uint8_t)(flags >> 16), (uint8_t)(flags >> 8),
                     (uint8_t)flags};
    spop_put(w, fl, 4);
    spop_put_varint(w, sid);
    spop_put_varint(w, fid);
    return at;
}

void spop_end_frame(spop_wire *w, size_t at) {
    size_t n = w->n - at - 4;
    w->b[at] = (uint8_t)(n >> 24);
    w->b[at + 1] = (uint8_t)(n >> 16);
    w->b[at + 2] = (uint8_t)(n >> 8);
    w->b[at + 3] = (uint8_t)n;
}

void spop_hello_frame(spop_wire *w, const char *versions, uint32_t max_frame, bool healthcheck) {
    size_t at = spop_begin_frame(w, PD_SPOP_HAPROXY_HELLO, PD_SPOP_FIN, 0, 0);
    if (versions != NULL) {
        spop_put_str(w, "supported-versions");
        spop_put(w, "\x08", 1);
        spop_put_str(w, versions);
    }
    if (max_frame != 0) {
        spop_put_str(w, "max-frame-size");
        spop_put(w, "\x03", 1);
        spop_put_varint(w, max_frame);
    }
    spop_put_str(w, "capabilities");
    spop_put(w, "\x08", 1);
    spop_put_str(w, "pipelining,async");
    if (healthcheck) {
        spop_put_str(w, "healthcheck");
        spop_put(w, "\x11", 1);
    }
    spop_end_frame(w, at);
}

void spop_notify_frame(spop_wire *w, uint32_t flags, uint64_t sid, uint64_t fid, const char *policy,
                       const void *key, size_t key_len) {
    size_t at = spop_begin_frame(w, PD_SPOP_NOTIFY, flags, sid, fid);
    spop_put_str(w, "check");
    spop_put(w, "\x03", 1);
    spop_put_str(w, "policy");
    spop_put(w, "\x08", 1);
    spop_put_str(w, policy);
    spop_put_str(w, "key");
    spop_put(w, "\x08", 1);
    spop_put_bytes(w, key, key_len);
    spop_put_str(w, "cost");
    spop_put(w, "\x04", 1);
    spop_put_varint(w, 1);
    spop_end_frame(w, at);
}

void spop_check_frame(spop_wire *w, uint64_t sid, uint64_t fid, const char *policy, const void *key,
                      size_t key_len) {
    spop_notify_frame(w, PD_SPOP_FIN, sid, fid, policy, key, key_len);
}

int spop_connect(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

void spop_send(int fd, const spop_wire *w) {
    assert_int_equal(send(fd, w->b, w->n, MSG_NOSIGNAL), (ssize_t)w->n);
}

int spop_read_frames(int fd, spop_wire *in, int want, bool *closed) {
    *closed = false;
    for (;;) {
        int n = 0;
        size_t pos = 0, len;
        while (pd_spop_split(in->b + pos, in->n - pos, sizeof(in->b), &len) == PD_SPOP_WHOLE) {
            pos += 4 + len;
            n++;
        }
        if (n >= want)
            return n;
        ssize_t r = recv(fd, in->b + in->n, sizeof(in->b) - in->n, 0);
        if (r <= 0) {
            *closed = r == 0;
            return n;
        }
        in->n += (size_t)r;
    }
}

size_t spop_frame_at(const spop_wire *in, int i, pd_spop_frame *f) {
    size_t pos = 0, len = 0;
    for (int k = 0; k <= i; k++) {
        assert_int_equal(pd_spop_split(in->b + pos, in->n - pos, sizeof(in->b), &len),
                         PD_SPOP_WHOLE);
        if (k < i)
            pos += 4 + len;
    }
    assert_int_equal(pd_spop_frame_parse(in->b + pos + 4, len, f), PD_SPOP_NORMAL);
    return len;
}

/* The SET-VAR named name in an ACK's actions (SET-VAR, 3 arguments, scope,
 * name, value); false when there is none. */
static bool ack_find(const pd_spop_frame *f, const char *name, pd_spop_value *out) {
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    while (r.p + 3 <= r.end) {
        r.p += 3;
        const uint8_t *n;
        size_t len;
        assert_int_equal(pd_spop_get_string(&r, &n, &len), 0);
        assert_int_equal(pd_spop_get_value(&r, out), 0);
        if (len == strlen(name) && memcmp(n, name, len) == 0)
            return true;
    }
    return false;
}

int64_t spop_ack_int(const pd_spop_frame *f, const char *name) {
    pd_spop_value v;
    return ack_find(f, name, &v) ? (int64_t)v.number : -1;
}

void spop_ack_str(const pd_spop_frame *f, const char *name, char *out, size_t cap) {
    pd_spop_value v;
    out[0] = '\0';
    if (ack_find(f, name, &v) && (v.type == PD_SPOP_STRING || v.type == PD_SPOP_BINARY))
        snprintf(out, cap, "%.*s", (int)v.len, (const char *)v.data);
}

bool spop_ack_has(const pd_spop_frame *f, const char *name) {
    pd_spop_value v;
    return ack_find(f, name, &v);
}
