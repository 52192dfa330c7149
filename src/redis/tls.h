/* tls.h — TLS to Redis (OpenSSL 3): the settings, the shared context made
 * from them, and a small non-blocking stream over a connected socket, plain
 * or TLS, for both the poll-driven blocking connection (conn.c) and an
 * event-loop one.
 *
 * A pt_tls is made once per handle from pt_tls_settings and used (borrowed;
 * the handle frees it last) by every connection of that handle: the
 * cluster's nodes, the sentinels, the master; its address travels in
 * pt_redis_url. It holds the SSL_CTX, with verification ON
 * unless insecure: the server's certificate against the CA file/dir (the
 * system store when neither is given) and its name against server_name, or
 * else the host the connection was made to (an IP literal is checked
 * against the certificate's IP addresses). pt_tls_reload reads the files
 * again; open connections keep what they started with.
 *
 * pt_sock never blocks and never owns the fd (the caller closes it). Its
 * calls return a count of bytes (> 0), PT_SOCK_DONE (handshake finished),
 * PT_SOCK_WANT_READ / PT_SOCK_WANT_WRITE (wait until the fd is readable /
 * writable, then call the same function again: over TLS a read can need
 * the fd writable and a write readable), or PT_SOCK_ERROR with a message
 * naming the cause in errbuf ("certificate verify failed: ...", "host name
 * mismatch", "the server wants a client certificate", "the server does not
 * speak TLS", "the server closed the connection"). End of stream is an
 * error. Writes never raise SIGPIPE (send with MSG_NOSIGNAL, plain or TLS).
 *
 * Over TLS, bytes can wait inside OpenSSL after a read: a reader must call
 * pt_sock_read until it returns PT_SOCK_WANT_READ before it polls the fd
 * (pt_sock_pending says whether a read would find bytes without the fd). */
#ifndef PT_REDIS_TLS_H
#define PT_REDIS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/ssl.h>

#include "porteiro.h"

/* What porteiro_options / the CLI / YAML say. Strings may be NULL or "". */
typedef struct pt_tls_settings {
    bool enabled;            /* rediss:// or --tls / tls: true */
    const char *ca_file;     /* PEM CA bundle; NULL with ca_dir NULL → the system store */
    const char *ca_dir;      /* a c_rehash'ed folder of CA certificates */
    const char *cert_file;   /* client certificate (PEM, chain allowed); needs key_file */
    const char *key_file;    /* its private key (PEM) */
    const char *server_name; /* SNI and the name verified; NULL → the host connected to */
    bool insecure;           /* no verification at all (the caller warns) */
} pt_tls_settings;

/* True when any TLS option besides enabled is set. */
bool pt_tls_settings_any(const pt_tls_settings *s);

typedef struct pt_tls pt_tls;

/* Makes the shared context: copies the settings and reads the CA and the
 * client certificate and key now. NULL on failure with the file and the
 * cause in errbuf, and *status PORTEIRO_ERR_INVALID (an unreadable file, a
 * key that does not match the certificate, a certificate without a key) or
 * PORTEIRO_ERR_NOMEM. */
pt_tls *pt_tls_new(const pt_tls_settings *s, porteiro_status *status, char *errbuf, size_t errlen);
/* NULL-safe. Every pt_sock made from t must be closed first. */
void pt_tls_free(pt_tls *t);
/* Reads the files again (certificate rotation): connections made from now
 * on use them, open ones keep theirs. On failure the old files stay in use
 * and the cause is in errbuf (as pt_tls_new). Thread-safe with pt_sock_init. */
porteiro_status pt_tls_reload(pt_tls *t, char *errbuf, size_t errlen);
/* Handshakes that succeeded and that failed (a server refusing the client
 * certificate after a TLS 1.3 handshake counts as a failure too). */
void pt_tls_counts(const pt_tls *t, uint64_t *handshakes, uint64_t *failures);

/* One connection's stream. Zero it, then pt_sock_init. */
typedef struct pt_sock {
    int fd;         /* connected (or connecting), O_NONBLOCK; not owned */
    SSL *ssl;       /* NULL: plain */
    pt_tls *tls;    /* borrowed: counts the handshakes */
    bool ready;     /* plain, or the TLS handshake is done */
    bool verify;    /* the peer is verified (not insecure) */
    bool got_data;  /* a read returned bytes (the server took us) */
    char name[256]; /* the name verified (for messages) */
} pt_sock;

#define PT_SOCK_DONE 0
#define PT_SOCK_ERROR (-1)
#define PT_SOCK_WANT_READ (-2)
#define PT_SOCK_WANT_WRITE (-3)

/* Wraps fd: plain when tls is NULL, else a new client SSL that will check
 * host (the host or IP connected to; tls's server_name wins) and send it as
 * SNI (a DNS name only). PT_SOCK_DONE, or PT_SOCK_ERROR (out of memory). */
int pt_sock_init(pt_sock *s, int fd, pt_tls *tls, const char *host, char *errbuf, size_t errlen);
/* Frees the SSL (no close_notify is sent); the fd stays open. */
void pt_sock_close(pt_sock *s);

/* One step of the TLS handshake (PT_SOCK_DONE at once when plain or done). */
int pt_sock_handshake(pt_sock *s, char *errbuf, size_t errlen);
/* Up to len bytes. Before the handshake is done, takes steps of it first. */
ssize_t pt_sock_read(pt_sock *s, void *buf, size_t len, char *errbuf, size_t errlen);
/* Writes up to len (> 0) bytes; over TLS a partial count is possible only
 * as 0 < n < len after SSL_MODE_ENABLE_PARTIAL_WRITE; after WANT_*, call
 * again with the same bytes (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER is set, so
 * the buffer may move). */
ssize_t pt_sock_write(pt_sock *s, const void *buf, size_t len, char *errbuf, size_t errlen);
/* Bytes OpenSSL holds already decrypted: a read would return them without
 * the fd being readable. */
bool pt_sock_pending(const pt_sock *s);
/* An idle connection: true when the server closed it or sent something
 * unasked (out of step). Over TLS, records that carry no data (TLS 1.3
 * session tickets) are consumed and do not count. */
bool pt_sock_stale(pt_sock *s);

/* A plain connection's first reply byte: true when it starts a TLS record
 * (an alert or a handshake), i.e. the port speaks TLS (use rediss://). */
bool pt_tls_record_byte(int first_byte);

#endif
