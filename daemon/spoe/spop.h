/* spop.h — HAProxy's Stream Processing Offload Protocol (SPOP 2.0) as
 * bytes: the frames porteirod's SPOE agent reads (HAPROXY-HELLO, NOTIFY,
 * HAPROXY-DISCONNECT) and writes (AGENT-HELLO, ACK, AGENT-DISCONNECT), the
 * typed data inside them and SPOP's varints. No I/O, no allocation, no
 * clock: spoe_server.c owns the sockets, and the fuzz target and the unit
 * tests drive this file directly. docs/haproxy.md.
 *
 * On the wire every frame is <LENGTH:4 bytes, big-endian> <FRAME>, and
 *   FRAME    = <TYPE:1> <FLAGS:4, big-endian> <STREAM-ID:varint> <FRAME-ID:varint> <PAYLOAD>
 *   PAYLOAD  = a KV-LIST (HELLO, DISCONNECT), messages (NOTIFY) or actions (ACK)
 * Every reader here checks each length against the bytes left: a frame
 * from the network can make it fail (-1, or a status), never read past the
 * end. */
#ifndef PD_SPOP_H
#define PD_SPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PD_SPOP_VERSION "2.0"           /* the one version this agent speaks */
#define PD_SPOP_MIN_FRAME 256           /* the protocol's floor for max-frame-size */
#define PD_SPOP_DEFAULT_FRAME 16380     /* HAProxy's own default (tune.bufsize - 4) */
#define PD_SPOP_MAX_FRAME (1024 * 1024) /* the most this agent will take */
#define PD_SPOP_FRAME_HEADER 7          /* the smallest frame: type, flags, two 1-byte ids */
#define PD_SPOP_MAX_VARINT 10           /* bytes of the longest 64-bit varint */

/* Frame types: 1-3 HAProxy's, 101-103 the agent's. */
enum {
    PD_SPOP_UNSET = 0, /* a fragment after the first: never accepted here */
    PD_SPOP_HAPROXY_HELLO = 1,
    PD_SPOP_HAPROXY_DISCONNECT = 2,
    PD_SPOP_NOTIFY = 3,
    PD_SPOP_AGENT_HELLO = 101,
    PD_SPOP_AGENT_DISCONNECT = 102,
    PD_SPOP_ACK = 103
};

/* FLAGS: FIN (the last fragment; always set here: no fragmentation) and
 * ABORT (drop a fragmented frame; meaningless on a whole one). */
#define PD_SPOP_FIN 0x1u
#define PD_SPOP_ABORT 0x2u

/* The status codes of a DISCONNECT frame (SPOE.txt, "Errors & timeouts"). */
typedef enum pd_spop_status {
    PD_SPOP_NORMAL = 0,
    PD_SPOP_IO = 1,
    PD_SPOP_TIMEOUT = 2,
    PD_SPOP_TOO_BIG = 3,         /* a frame over the negotiated max-frame-size */
    PD_SPOP_INVALID = 4,         /* a frame that does not parse */
    PD_SPOP_NO_VERSION = 5,      /* HELLO without supported-versions */
    PD_SPOP_NO_FRAME_SIZE = 6,   /* HELLO without max-frame-size */
    PD_SPOP_NO_CAPABILITIES = 7, /* HELLO without capabilities */
    PD_SPOP_BAD_VERSION = 8,     /* no 2.x among the versions offered */
    PD_SPOP_BAD_FRAME_SIZE = 9,  /* max-frame-size below 256 */
    PD_SPOP_FRAGMENTED = 10,     /* a frame without FIN, or an UNSET one */
    PD_SPOP_INTERLACED = 11,
    PD_SPOP_FRAME_ID = 12,
    PD_SPOP_RESOURCE = 13, /* out of memory */
    PD_SPOP_UNKNOWN = 99
} pd_spop_status;

/* The words sent with each status in a DISCONNECT's "message". */
const char *pd_spop_status_text(pd_spop_status st);

/* Typed data: <TYPE:low 4 bits><FLAGS:high 4 bits>[value]. */
typedef enum pd_spop_type {
    PD_SPOP_NULL = 0,
    PD_SPOP_BOOL = 1, /* the value is flag bit 0 (0x10 in the byte) */
    PD_SPOP_INT32 = 2,
    PD_SPOP_UINT32 = 3,
    PD_SPOP_INT64 = 4,
    PD_SPOP_UINT64 = 5,
    PD_SPOP_IPV4 = 6,   /* 4 bytes, network order */
    PD_SPOP_IPV6 = 7,   /* 16 bytes */
    PD_SPOP_STRING = 8, /* <LENGTH:varint><BYTES> */
    PD_SPOP_BINARY = 9
} pd_spop_type;

typedef struct pd_spop_value {
    pd_spop_type type;
    bool boolean;        /* BOOL */
    uint64_t number;     /* the four integer types: the varint as sent (a
                            signed one is its two's complement) */
    const uint8_t *data; /* STRING, BINARY, IPV4, IPV6: borrowed from the frame */
    size_t len;
} pd_spop_value;

/* ---- varints ----------------------------------------------------------
 * X < 240 is one byte; above, the first byte holds 240 + its 4 low bits and
 * each next byte 7 more, the high bit saying another follows. */

/* Writes v at out (cap bytes of room): the bytes written, 0 without room. */
size_t pd_spop_varint_put(uint64_t v, uint8_t *out, size_t cap);
/* Reads one at *p (not past end), moving *p. 0, or -1 when it is cut short
 * or does not fit 64 bits (then *p is left anywhere before end). */
int pd_spop_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* ---- frames ------------------------------------------------------------ */

typedef enum pd_spop_split_result {
    PD_SPOP_NEED_MORE, /* not a whole frame yet */
    PD_SPOP_WHOLE,     /* *frame_len bytes after the 4 of the length */
    PD_SPOP_OVERSIZED  /* the length announced is over max: PD_SPOP_TOO_BIG */
} pd_spop_split_result;

/* Where the first frame of buf (len bytes read so far) ends. */
pd_spop_split_result pd_spop_split(const uint8_t *buf, size_t len, size_t max_frame,
                                   size_t *frame_len);

typedef struct pd_spop_frame {
    uint8_t type;
    uint32_t flags;
    uint64_t stream_id, frame_id;
    const uint8_t *payload; /* borrowed */
    size_t payload_len;
} pd_spop_frame;

/* The frame's metadata (frame: the bytes after the length). PD_SPOP_NORMAL,
 * or PD_SPOP_INVALID when even that does not parse. */
pd_spop_status pd_spop_frame_parse(const uint8_t *frame, size_t len, pd_spop_frame *out);

/* ---- reading payloads -------------------------------------------------- */

/* A cursor over a payload, or over a message's arguments. */
typedef struct pd_spop_reader {
    const uint8_t *p, *end;
} pd_spop_reader;

/* One STRING-shaped item (<LENGTH:varint><BYTES>, as a KV name). 0 or -1. */
int pd_spop_get_string(pd_spop_reader *r, const uint8_t **s, size_t *len);
/* One typed value. 0, or -1 when malformed or of a reserved type (10-15). */
int pd_spop_get_value(pd_spop_reader *r, pd_spop_value *v);

/* What HAPROXY-HELLO says. */
typedef struct pd_spop_hello {
    uint32_t max_frame_size;               /* HAProxy's */
    bool pipelining, async, fragmentation; /* the capabilities it offers */
    bool healthcheck;                      /* a health check: answer, then close */
    const uint8_t *engine_id;              /* borrowed; NULL when absent */
    size_t engine_id_len;
} pd_spop_hello;

/* Reads a HAPROXY-HELLO frame: PD_SPOP_NORMAL, or the status of the
 * DISCONNECT to answer with (INVALID, NO_VERSION, NO_FRAME_SIZE,
 * NO_CAPABILITIES, BAD_VERSION, BAD_FRAME_SIZE, FRAGMENTED). */
pd_spop_status pd_spop_hello_parse(const pd_spop_frame *f, pd_spop_hello *out);

/* Reads a HAPROXY-DISCONNECT frame: its status-code (PD_SPOP_UNKNOWN when
 * absent) and message (borrowed; NULL when absent). PD_SPOP_NORMAL, or
 * PD_SPOP_INVALID when it does not parse. */
pd_spop_status pd_spop_disconnect_parse(const pd_spop_frame *f, uint32_t *code,
                                        const uint8_t **message, size_t *message_len);

/* One message of a NOTIFY: <NAME:string> <NB-ARGS:1 byte> <KV-LIST of NB-ARGS>. */
typedef struct pd_spop_message {
    const uint8_t *name; /* borrowed */
    size_t name_len;
    unsigned nargs;
    pd_spop_reader args; /* its arguments, for pd_spop_next_arg */
} pd_spop_message;

/* Checks that a NOTIFY payload is a well-formed list of messages: 0, or -1
 * (answer PD_SPOP_INVALID). After 0, the two readers below cannot fail. */
int pd_spop_notify_check(const uint8_t *payload, size_t len);
/* The next message at r: 1, 0 at the end, -1 when malformed. */
int pd_spop_next_message(pd_spop_reader *r, pd_spop_message *m);
/* The next argument of m (name may be empty: an argument without name=):
 * 1, 0 after the last, -1 when malformed. */
int pd_spop_next_arg(pd_spop_message *m, const uint8_t **name, size_t *name_len, pd_spop_value *v);

/* ---- writing frames ---------------------------------------------------- */

/* A frame being written into buf: the 4 bytes of its length, then the
 * frame. Once something does not fit within cap, or within max_frame bytes
 * of frame, the writer is spoiled (failed) and pd_spop_end returns 0. */
typedef struct pd_spop_writer {
    uint8_t *buf;
    size_t cap, len;
    size_t max_frame; /* the negotiated max-frame-size */
    bool failed;
} pd_spop_writer;

/* Starts a frame of type with FIN set (SPOP 2.0 frames here are never
 * fragmented). */
void pd_spop_begin(pd_spop_writer *w, uint8_t *buf, size_t cap, size_t max_frame, uint8_t type,
                   uint64_t stream_id, uint64_t frame_id);
/* The frame's length written in front: the bytes to send (4 + frame), or 0
 * when it did not fit. */
size_t pd_spop_end(pd_spop_writer *w);

/* KV items (HELLO, DISCONNECT). */
void pd_spop_put_kv_string(pd_spop_writer *w, const char *name, const char *s, size_t len);
void pd_spop_put_kv_uint32(pd_spop_writer *w, const char *name, uint32_t v);

/* ACK actions. A scope: 0 proc, 1 sess, 2 txn, 3 req, 4 res. Each adds
 * itself whole or not at all: false (and the writer still usable) when the
 * action would take the frame over max_frame, so an answer can drop what
 * does not fit and keep the rest. */
enum {
    PD_SPOP_SCOPE_PROC = 0,
    PD_SPOP_SCOPE_SESS = 1,
    PD_SPOP_SCOPE_TXN = 2,
    PD_SPOP_SCOPE_REQ = 3,
    PD_SPOP_SCOPE_RES = 4
};
bool pd_spop_set_var_int(pd_spop_writer *w, int scope, const char *name, int64_t v);
bool pd_spop_set_var_string(pd_spop_writer *w, int scope, const char *name, const char *s,
                            size_t len);

/* Whole frames, into buf (cap bytes): the bytes to send, 0 if they do not
 * fit. AGENT-HELLO: version 2.0, max_frame, capabilities "pipelining". */
size_t pd_spop_agent_hello(uint8_t *buf, size_t cap, uint32_t max_frame);
/* AGENT-DISCONNECT with st and its text (pd_spop_status_text). */
size_t pd_spop_agent_disconnect(uint8_t *buf, size_t cap, pd_spop_status st);

#endif
