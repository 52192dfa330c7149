/* outbuf.h — a connection's pending output, kept the same way by the
 * HTTP/1.1 and the gRPC servers: bytes appended at len, sent from pos, the
 * room doubled as needed; and the send loop that empties it into a socket
 * (plain, or through a TLS write) without ever blocking. */
#ifndef PD_OUTBUF_H
#define PD_OUTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "conns.h"

typedef struct pd_outbuf {
    char *data;
    size_t pos, len, cap; /* data[pos, len) not sent yet; cap bytes of room */
} pd_outbuf;

/* Room for n more bytes at data + len; an emptied buffer starts over at 0.
 * first: the size of the first room. False when out of memory. */
bool pd_outbuf_reserve(pd_outbuf *b, size_t n, size_t first);
/* pd_outbuf_reserve, then the n bytes copied in. */
bool pd_outbuf_append(pd_outbuf *b, const void *data, size_t n, size_t first);
static inline size_t pd_outbuf_unsent(const pd_outbuf *b) {
    return b->len - b->pos;
}
/* Frees the room; the buffer is empty after. */
void pd_outbuf_free(pd_outbuf *b);

typedef enum pd_send_result {
    PD_SENT,         /* all sent: the buffer is empty (pos = len = 0) */
    PD_SEND_BLOCKED, /* the socket is full: wait until it is writable */
    PD_SEND_FAILED   /* the connection failed or the peer closed */
} pd_send_result;

/* Writes n bytes like send(2): the count written, or -1 with errno. */
typedef ssize_t pd_send_fn(void *arg, const char *data, size_t n);

/* Sends what b holds to c with send_fn (NULL: send(2) on c's socket), until
 * it is all sent, the socket is full, or the connection fails; each write
 * that makes progress counts as c's activity (pd_conn_touch). */
pd_send_result pd_conn_send(pd_conn *c, pd_outbuf *b, pd_send_fn *send_fn, void *arg);

#endif
