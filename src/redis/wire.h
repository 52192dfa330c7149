/* wire.h — the bytes of RESP for the event-loop transport, with no socket:
 * commands appended to an output buffer, and a hiredis redisReader whose
 * reply objects live in an arena (one reset per reply, no malloc per
 * element). Used by async_conn.c; the blocking connection keeps hiredis's
 * redisContext. */
#ifndef PT_REDIS_WIRE_H
#define PT_REDIS_WIRE_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

/* A growing byte buffer: bytes [off, len) are still to be written. */
typedef struct pt_buf {
    char *data;
    size_t off, len, cap;
} pt_buf;

/* Appends one command in RESP ("*argc" then "$len" and the bytes of each
 * argument). Returns 0, or -1 on ENOMEM (the buffer is then unchanged). */
int pt_buf_command(pt_buf *b, int argc, const char *const *argv, const size_t *argvlen);
/* The first n unwritten bytes are written: drops them. */
void pt_buf_consume(pt_buf *b, size_t n);
void pt_buf_free(pt_buf *b);

/* The most elements one array reply may have, and the longest string: a
 * server announcing more is a protocol error, never a huge allocation. */
#define PT_WIRE_MAX_ELEMENTS (1 << 20)
#define PT_WIRE_MAX_STRING (64 << 20)
/* The most bytes held for a reply still incomplete (a bulk string whose
 * announced length never comes is otherwise waited for, until the check's
 * deadline). */
#define PT_WIRE_MAX_PENDING (PT_WIRE_MAX_STRING + 4096)

typedef struct pt_wire_reader pt_wire_reader;

pt_wire_reader *pt_wire_reader_new(void);
void pt_wire_reader_free(pt_wire_reader *r);
/* Adds bytes read from the socket. -1 on ENOMEM. */
int pt_wire_reader_feed(pt_wire_reader *r, const char *buf, size_t len);
/* The next complete reply: 1 and *reply (valid until the next call of
 * pt_wire_reader_next or _free), 0 when more bytes are needed, -1 on a
 * protocol error (the message in errbuf; the stream is then unusable). */
int pt_wire_reader_next(pt_wire_reader *r, redisReply **reply, char *errbuf, size_t errlen);

#endif
