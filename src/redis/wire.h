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

/* The bounds are command.h's, as for every reader: an array of more than
 * PT_MAX_REPLY_ELEMENTS is a protocol error, never a huge allocation, and
 * more than PT_MAX_REPLY_BYTES held for an incomplete reply (a bulk whose
 * announced length never comes) too. */

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
