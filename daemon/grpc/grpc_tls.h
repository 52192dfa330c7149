/* grpc_tls.h — TLS for the gRPC listener (OpenSSL, ALPN "h2"): a context made
 * from a certificate chain and a key, and per connection the non-blocking
 * reads and writes the server makes, with the handshake inside them. */
#ifndef PD_GRPC_TLS_H
#define PD_GRPC_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct pd_tls_ctx pd_tls_ctx;
typedef struct pd_tls pd_tls;

/* From PEM files (cert: the chain, leaf first). NULL with why in err. */
pd_tls_ctx *pd_tls_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen);
void pd_tls_ctx_free(pd_tls_ctx *ctx);

/* The server side of a TLS connection on fd (non-blocking); NULL when out
 * of memory. pd_tls_free does not close fd. */
pd_tls *pd_tls_new(pd_tls_ctx *ctx, int fd);
void pd_tls_free(pd_tls *t);

/* As recv() and send(): bytes (> 0), 0 at the peer's close_notify or EOF,
 * -1 with errno EAGAIN when it must wait for the socket (*wants_write: to be
 * writable, else readable), -1 with another errno on an error (a failed
 * handshake: EPROTO). */
ssize_t pd_tls_read(pd_tls *t, void *buf, size_t n, bool *wants_write);
ssize_t pd_tls_write(pd_tls *t, const void *buf, size_t n, bool *wants_write);
/* Decrypted bytes already read from the socket, not yet returned. */
bool pd_tls_pending(const pd_tls *t);

#endif
