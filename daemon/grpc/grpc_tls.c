/* grpc_tls.c — OpenSSL for the gRPC listener (grpc_tls.h). */
#include "grpc_tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_tls_ctx {
    SSL_CTX *ctx;
};

struct pd_tls {
    SSL *ssl;
};

/* ALPN: "h2" when the client offers it; a client offering only others is
 * refused (no_application_protocol); one offering none speaks h2 anyway. */
static int select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                     const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl;
    (void)arg;
    for (unsigned int i = 0; i < inlen; i += 1u + in[i]) {
        if (in[i] == 2 && i + 3 <= inlen && memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
        }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static void openssl_error(const char *what, const char *file, char *err, size_t errlen) {
    char why[256];
    ERR_error_string_n(ERR_get_error(), why, sizeof(why));
    snprintf(err, errlen, "%s %s: %s", what, file, why);
    ERR_clear_error();
}

pd_tls_ctx *pd_tls_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen) {
    pd_tls_ctx *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(t);
        return NULL;
    }
    /* TLS 1.2 and up, as HTTP/2 requires; no session tickets to keep. */
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                 SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_alpn_select_cb(t->ctx, select_h2, NULL);
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert_file) != 1) {
        openssl_error("cannot use the certificate", cert_file, err, errlen);
    } else if (SSL_CTX_use_PrivateKey_file(t->ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        openssl_error("cannot use the key", key_file, err, errlen);
    } else if (SSL_CTX_check_private_key(t->ctx) != 1) {
        openssl_error("the key does not match the certificate", cert_file, err, errlen);
    } else {
        return t;
    }
    pd_tls_ctx_free(t);
    return NULL;
}

void pd_tls_ctx_free(pd_tls_ctx *t) {
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

pd_tls *pd_tls_new(pd_tls_ctx *ctx, int fd) {
    pd_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(ctx->ctx);
    if (t->ssl == NULL || SSL_set_fd(t->ssl, fd) != 1) {
        pd_tls_free(t);
        return NULL;
    }
    SSL_set_accept_state(t->ssl);
    return t;
}

void pd_tls_free(pd_tls *t) {
    if (t == NULL)
        return;
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    free(t);
}

/* errno and the return value for an SSL_read/SSL_write that gave rc. */
static ssize_t result(pd_tls *t, int rc, bool *wants_write) {
    if (rc > 0)
        return rc;
    int e = SSL_get_error(t->ssl, rc);
    *wants_write = e == SSL_ERROR_WANT_WRITE;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    int saved = errno;
    ERR_clear_error();
    errno = e == SSL_ERROR_SYSCALL && saved != 0 ? saved : EPROTO;
    return e == SSL_ERROR_SYSCALL && saved == 0 ? 0 : -1; /* EOF without close_notify */
}

ssize_t pd_tls_read(pd_tls *t, void *buf, size_t n, bool *wants_write) {
    *wants_write = false;
    ERR_clear_error();
    return result(t, SSL_read(t->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n), wants_write);
}

ssize_t pd_tls_write(pd_tls *t, const void *buf, size_t n, bool *wants_write) {
    *wants_write = false;
    ERR_clear_error();
    return result(t, SSL_write(t->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n), wants_write);
}

bool pd_tls_pending(const pd_tls *t) {
    return SSL_pending(t->ssl) > 0;
}
