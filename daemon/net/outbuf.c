/* outbuf.c — a connection's pending output and its send loop (outbuf.h). */
#include "outbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

bool pd_outbuf_reserve(pd_outbuf *b, size_t n, size_t first) {
    if (b->pos == b->len)
        b->pos = b->len = 0;
    if (b->len + n <= b->cap)
        return true;
    size_t cap = b->cap > 0 ? b->cap : first;
    while (cap < b->len + n)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return false;
    b->data = p;
    b->cap = cap;
    return true;
}

bool pd_outbuf_append(pd_outbuf *b, const void *data, size_t n, size_t first) {
    if (!pd_outbuf_reserve(b, n, first))
        return false;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return true;
}

void pd_outbuf_free(pd_outbuf *b) {
    free(b->data);
    *b = (pd_outbuf){0};
}

pd_send_result pd_conn_send(pd_conn *c, pd_outbuf *b, pd_send_fn *send_fn, void *arg) {
    while (b->pos < b->len) {
        const char *p = b->data + b->pos;
        size_t left = b->len - b->pos;
        ssize_t n = send_fn != NULL ? send_fn(arg, p, left) : send(c->fd, p, left, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return PD_SEND_BLOCKED;
        if (n <= 0)
            return PD_SEND_FAILED;
        b->pos += (size_t)n;
        pd_conn_touch(c);
    }
    b->pos = b->len = 0;
    return PD_SENT;
}
