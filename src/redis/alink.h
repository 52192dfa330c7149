/* alink.h — one socket to one Redis node on the event loop, as bytes: a
 * non-blocking connect (TCP or unix), commands appended to one output
 * buffer and written together, replies read and parsed in order (wire.h).
 * It knows nothing of what the commands mean: async_conn.c pairs each reply
 * with what it answers. Loop thread only.
 *
 * The byte stream is a pt_sock (tls.h): plain, or TLS when the target has
 * a TLS context, its handshake made once the TCP connect completes (the
 * owner's connect timer bounds both). */
#ifndef PT_REDIS_ALINK_H
#define PT_REDIS_ALINK_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

struct pt_loop;
typedef struct pt_alink pt_alink;

/* What the link tells its owner, on the loop thread. */
typedef struct pt_alink_events {
    /* One reply, in the order the commands were appended. reply is valid
     * during the call only. */
    void (*on_reply)(void *arg, const redisReply *reply);
    /* The link failed (refused, reset, closed by the server, a protocol
     * error): why says how. Nothing more comes from it; the owner frees it
     * (pt_alink_free is safe inside any of these callbacks). */
    void (*on_down)(void *arg, const char *why);
} pt_alink_events;

/* Where to connect: a unix socket path, or a numeric IPv4/IPv6 address and
 * port (names are resolved by the caller, redis/resolve.h). */
typedef struct pt_alink_target {
    bool is_unix;
    const char *addr; /* the path, or the numeric address */
    int port;
    struct pt_tls *tls; /* TLS when not NULL (borrowed, outlives the link) */
    const char *host;   /* the name the certificate must carry (url's host) */
} pt_alink_target;

/* Starts connecting. NULL with the reason in errbuf (bad address, no
 * socket, ENOMEM, refused at once). Commands may be appended at once: they
 * are written when the connection is up. */
pt_alink *pt_alink_new(const struct pt_loop *loop, const pt_alink_target *t,
                       const pt_alink_events *ev, void *arg, char *errbuf, size_t errlen);
/* Closes the socket. No callback runs from here on. */
void pt_alink_free(pt_alink *l);

/* Appends one command to the output buffer. -1 on ENOMEM. */
int pt_alink_command(pt_alink *l, int argc, const char *const *argv, const size_t *argvlen);
/* Writes what was appended: at once when the socket takes it, else when it
 * can. A write failure reports on_down later, on the loop. */
void pt_alink_flush(pt_alink *l);
/* Reads what the socket holds now and hands out its replies (on_reply,
 * or on_down), as the loop would; for an owner about to decide that a
 * reply is late, when the loop may have stalled. Not inside a callback. */
void pt_alink_poll(pt_alink *l);
/* True once the connection is up (the connect, and the TLS handshake
 * when there is one, completed). */
bool pt_alink_up(const pt_alink *l);
/* True while a TLS handshake is under way (the TCP connect is done). */
bool pt_alink_in_handshake(const pt_alink *l);

#endif
