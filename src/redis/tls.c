/* tls.c — TLS settings to an SSL_CTX, and the plain-or-TLS stream (tls.h). */
#include "redis/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

struct pt_tls {
    pthread_mutex_t lock;  /* guards ctx: pt_tls_reload swaps it */
    SSL_CTX *ctx;          /* each SSL holds its own reference to its ctx */
    pt_tls_settings s;     /* copies of the strings, read again by reload */
    char server_name[256]; /* "" → the host connected to */
    atomic_uint_fast64_t handshakes, failures;
};

bool pt_tls_settings_any(const pt_tls_settings *s) {
    const char *f[] = {s->ca_file, s->ca_dir, s->cert_file, s->key_file, s->server_name};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i] != NULL && f[i][0] != '\0')
            return true;
    return s->insecure;
}

static bool set(const char *s) {
    return s != NULL && s[0] != '\0';
}

/* The first queued OpenSSL error's reason ("" if none); empties the queue. */
static const char *ssl_reason(void) {
    unsigned long code = ERR_peek_error();
    const char *why = code != 0 ? ERR_reason_error_string(code) : NULL;
    ERR_clear_error();
    return why != NULL ? why : "unknown error";
}

/* A file OpenSSL will read: open it ourselves first, so that a missing or
 * unreadable one is named with errno's words, not OpenSSL's. */
static bool readable(const char *what, const char *path, char *errbuf, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(errbuf, errlen, "tls: %s %s: %s", what, path, strerror(errno));
        return false;
    }
    fclose(f);
    return true;
}

/* An encrypted key would make OpenSSL prompt on the terminal: refuse. */
static int no_password(char *buf, int size, int rwflag, void *u) {
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* Index of the ex_data flag "the server asked for a client certificate". */
static int cert_asked_index = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static BIO_METHOD *sock_method;

/* Called by OpenSSL when the server requests a certificate the context does
 * not have: remember it, for the error message, and send none. */
static int note_cert_asked(SSL *ssl, X509 **x509, EVP_PKEY **pkey) {
    (void)x509, (void)pkey;
    SSL_set_ex_data(ssl, cert_asked_index, (void *)1);
    return 0;
}

static porteiro_status load_verify(SSL_CTX *ctx, const pt_tls_settings *s, char *errbuf,
                                   size_t errlen) {
    if (s->insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return PORTEIRO_OK;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (!set(s->ca_file) && !set(s->ca_dir)) {
        if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
            snprintf(errbuf, errlen, "tls: the system CA store: %s", ssl_reason());
            return PORTEIRO_ERR_INVALID;
        }
        return PORTEIRO_OK;
    }
    if (set(s->ca_file) && !readable("CA file", s->ca_file, errbuf, errlen))
        return PORTEIRO_ERR_INVALID;
    if (SSL_CTX_load_verify_locations(ctx, set(s->ca_file) ? s->ca_file : NULL,
                                      set(s->ca_dir) ? s->ca_dir : NULL) != 1) {
        snprintf(errbuf, errlen, "tls: CA %s %s: %s", set(s->ca_file) ? "file" : "folder",
                 set(s->ca_file) ? s->ca_file : s->ca_dir, ssl_reason());
        return PORTEIRO_ERR_INVALID;
    }
    return PORTEIRO_OK;
}

static porteiro_status load_client_cert(SSL_CTX *ctx, const pt_tls_settings *s, char *errbuf,
                                        size_t errlen) {
    if (set(s->cert_file) != set(s->key_file)) {
        snprintf(errbuf, errlen,
                 "tls: a client certificate needs its key and a key its "
                 "certificate (--cert FILE --key FILE, or tls: cert/key)");
        return PORTEIRO_ERR_INVALID;
    }
    if (!set(s->cert_file))
        return PORTEIRO_OK;
    if (!readable("client certificate", s->cert_file, errbuf, errlen) ||
        !readable("key", s->key_file, errbuf, errlen))
        return PORTEIRO_ERR_INVALID;
    if (SSL_CTX_use_certificate_chain_file(ctx, s->cert_file) != 1) {
        snprintf(errbuf, errlen, "tls: client certificate %s: %s", s->cert_file, ssl_reason());
        return PORTEIRO_ERR_INVALID;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, s->key_file, SSL_FILETYPE_PEM) != 1) {
        unsigned long code = ERR_peek_error();
        if (ERR_GET_LIB(code) != ERR_LIB_X509 ||
            ERR_GET_REASON(code) != X509_R_KEY_VALUES_MISMATCH) {
            snprintf(errbuf, errlen, "tls: key %s: %s", s->key_file, ssl_reason());
            return PORTEIRO_ERR_INVALID;
        }
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(errbuf, errlen, "tls: key %s does not match the certificate %s", s->key_file,
                 s->cert_file);
        return PORTEIRO_ERR_INVALID;
    }
    return PORTEIRO_OK;
}

static void init_once(void);

/* A fresh SSL_CTX from t's settings. */
static SSL_CTX *make_ctx(const pt_tls_settings *s, porteiro_status *status, char *errbuf,
                         size_t errlen) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ERR_clear_error();
        *status = PORTEIRO_ERR_NOMEM;
        snprintf(errbuf, errlen, "tls: %s", "out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One recv takes whatever the socket holds, not a record header and
     * then its body: a reply costs one system call, as in plain text.
     * Bytes read ahead wait inside OpenSSL (pt_sock_pending sees them). */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_default_passwd_cb(ctx, no_password);
    SSL_CTX_set_client_cert_cb(ctx, note_cert_asked);
    *status = load_verify(ctx, s, errbuf, errlen);
    if (*status == PORTEIRO_OK)
        *status = load_client_cert(ctx, s, errbuf, errlen);
    if (*status != PORTEIRO_OK) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

static char *copy(const char *s, bool *ok) {
    if (!set(s))
        return NULL;
    char *c = strdup(s);
    *ok = *ok && c != NULL;
    return c;
}

pt_tls *pt_tls_new(const pt_tls_settings *s, porteiro_status *status, char *errbuf, size_t errlen) {
    pthread_once(&once, init_once);
    pt_tls *t = calloc(1, sizeof(*t));
    bool ok = t != NULL && sock_method != NULL && cert_asked_index >= 0;
    if (t != NULL) {
        t->s = (pt_tls_settings){.enabled = true, .insecure = s->insecure};
        t->s.ca_file = copy(s->ca_file, &ok);
        t->s.ca_dir = copy(s->ca_dir, &ok);
        t->s.cert_file = copy(s->cert_file, &ok);
        t->s.key_file = copy(s->key_file, &ok);
        if (set(s->server_name))
            snprintf(t->server_name, sizeof(t->server_name), "%s", s->server_name);
        pthread_mutex_init(&t->lock, NULL);
    }
    if (!ok) {
        *status = PORTEIRO_ERR_NOMEM;
        snprintf(errbuf, errlen, "tls: %s", "out of memory");
        pt_tls_free(t);
        return NULL;
    }
    if ((t->ctx = make_ctx(&t->s, status, errbuf, errlen)) == NULL) {
        pt_tls_free(t);
        return NULL;
    }
    return t;
}

void pt_tls_free(pt_tls *t) {
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free((char *)t->s.ca_file);
    free((char *)t->s.ca_dir);
    free((char *)t->s.cert_file);
    free((char *)t->s.key_file);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

porteiro_status pt_tls_reload(pt_tls *t, char *errbuf, size_t errlen) {
    porteiro_status st;
    SSL_CTX *fresh = make_ctx(&t->s, &st, errbuf, errlen);
    if (fresh == NULL)
        return st;
    pthread_mutex_lock(&t->lock);
    SSL_CTX *old = t->ctx;
    t->ctx = fresh;
    pthread_mutex_unlock(&t->lock);
    SSL_CTX_free(old); /* the connections made from it keep their reference */
    return PORTEIRO_OK;
}

void pt_tls_counts(const pt_tls *t, uint64_t *handshakes, uint64_t *failures) {
    *handshakes = atomic_load(&((pt_tls *)t)->handshakes);
    *failures = atomic_load(&((pt_tls *)t)->failures);
}

/* ---- a socket BIO that sends with MSG_NOSIGNAL ---------------------- */
/* OpenSSL's own socket BIO writes with write(): a closed peer would raise
 * SIGPIPE in the host. This one keeps the fd in the BIO's data. */

static int bio_write(BIO *b, const char *buf, int len) {
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len) {
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
    BIO_set_init(b, 1);
    return 1;
}

static void init_once(void) {
    cert_asked_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "porteiro socket");
    if (m == NULL)
        return;
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    sock_method = m; /* kept for the process's life */
}

/* ---- the stream ------------------------------------------------------ */

static bool is_ip(const char *host) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

int pt_sock_init(pt_sock *s, int fd, pt_tls *tls, const char *host, char *errbuf, size_t errlen) {
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->ready = tls == NULL;
    if (tls == NULL)
        return PT_SOCK_DONE;
    const char *name = tls->server_name[0] ? tls->server_name : host;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->verify = !tls->s.insecure;
    s->tls = tls;
    pthread_mutex_lock(&tls->lock);
    s->ssl = SSL_new(tls->ctx);
    pthread_mutex_unlock(&tls->lock);
    BIO *bio = NULL;
    if (s->ssl == NULL || (bio = BIO_new(sock_method)) == NULL)
        goto nomem;
    BIO_set_data(bio, (void *)(intptr_t)fd);
    SSL_set_bio(s->ssl, bio, bio);
    SSL_set_connect_state(s->ssl);
    if (!is_ip(name) && SSL_set_tlsext_host_name(s->ssl, name) != 1)
        goto nomem;
    if (s->verify) {
        int ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), name)
                             : SSL_set1_host(s->ssl, name);
        if (ok != 1)
            goto nomem;
    }
    return PT_SOCK_DONE;
nomem:
    ERR_clear_error();
    pt_sock_close(s);
    snprintf(errbuf, errlen, "tls: cannot set up a connection to '%s'", name);
    return PT_SOCK_ERROR;
}

void pt_sock_close(pt_sock *s) {
    if (s->ssl != NULL)
        SSL_free(s->ssl); /* frees the BIO too, not the fd */
    s->ssl = NULL;
    s->ready = false;
}

/* Reasons that mean the bytes from the server were not TLS records. */
static bool not_tls(int reason) {
    return reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_UNKNOWN_PROTOCOL ||
           reason == SSL_R_PACKET_LENGTH_TOO_LONG || reason == SSL_R_HTTP_REQUEST ||
           reason == SSL_R_UNEXPECTED_RECORD || reason == SSL_R_LENGTH_TOO_SHORT ||
           reason == SSL_R_BAD_PACKET_LENGTH;
}

/* Reasons that carry the server's alert about our certificate. */
static bool cert_refused(int reason) {
    return reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE || reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
           reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
           reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED ||
           reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR;
}

/* After an SSL call returned ret <= 0: WANT_*, or the error in words. */
static int failed(pt_sock *s, int ret, char *errbuf, size_t errlen) {
    int saved = errno;
    int e = SSL_get_error(s->ssl, ret);
    if (e == SSL_ERROR_WANT_READ)
        return PT_SOCK_WANT_READ;
    if (e == SSL_ERROR_WANT_WRITE)
        return PT_SOCK_WANT_WRITE;
    unsigned long code = ERR_peek_error();
    int reason = code != 0 && ERR_GET_LIB(code) == ERR_LIB_SSL ? ERR_GET_REASON(code) : 0;
    const char *why = code != 0 ? ERR_reason_error_string(code) : NULL;
    ERR_clear_error();
    long vr = SSL_get_verify_result(s->ssl);
    bool asked = SSL_get_ex_data(s->ssl, cert_asked_index) != NULL;
    bool eof = reason == SSL_R_UNEXPECTED_EOF_WHILE_READING || e == SSL_ERROR_ZERO_RETURN ||
               (e == SSL_ERROR_SYSCALL && saved == 0);
    const char *when = s->ready ? "" : " during the handshake";
    /* TLS 1.3: the server checks our certificate after our side of the
     * handshake is done; a refusal may arrive as a reset, not an alert. */
    bool cut_early = s->ready && !s->got_data && (eof || e == SSL_ERROR_SYSCALL);
    bool refused = reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED || cert_refused(reason) ||
                   (asked && !s->tls->s.cert_file) || (cut_early && s->tls->s.cert_file);
    if (!s->ready || refused)
        atomic_fetch_add(&s->tls->failures, 1);
    if (s->verify && vr != X509_V_OK &&
        (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH))
        snprintf(errbuf, errlen,
                 "tls: host name mismatch: the server's certificate is not for '%s' "
                 "(--sni / tls: server_name names the one to expect)",
                 s->name);
    else if (s->verify && vr != X509_V_OK)
        snprintf(errbuf, errlen, "tls: certificate verify failed: %s (--cacert names the CA)",
                 X509_verify_cert_error_string(vr));
    else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
             (asked && !s->tls->s.cert_file &&
              (eof || e == SSL_ERROR_SYSCALL || reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)))
        snprintf(errbuf, errlen,
                 "tls: the server wants a client certificate (--cert FILE --key FILE)");
    else if (cert_refused(reason))
        snprintf(errbuf, errlen, "tls: the server refused our client certificate: %s", why);
    else if (cut_early && s->tls->s.cert_file)
        snprintf(errbuf, errlen,
                 "tls: the server closed the connection right after the handshake (%s): did "
                 "it refuse our client certificate?",
                 eof ? "end of stream" : strerror(saved));
    else if (not_tls(reason))
        snprintf(errbuf, errlen,
                 "tls: the server does not speak TLS (%s; a plain port behind rediss:// or "
                 "--tls?)",
                 why);
    else if (eof)
        snprintf(errbuf, errlen, "tls: the server closed the connection%s", when);
    else if (e == SSL_ERROR_SYSCALL)
        snprintf(errbuf, errlen, "tls: %s%s", strerror(saved), when);
    else
        snprintf(errbuf, errlen, "tls: %s%s", why != NULL ? why : "error", when);
    return PT_SOCK_ERROR;
}

int pt_sock_handshake(pt_sock *s, char *errbuf, size_t errlen) {
    if (s->ready)
        return PT_SOCK_DONE;
    if (s->ssl == NULL) {
        snprintf(errbuf, errlen, "tls: %s", "no connection");
        return PT_SOCK_ERROR;
    }
    ERR_clear_error();
    errno = 0;
    int ret = SSL_do_handshake(s->ssl);
    if (ret == 1) {
        s->ready = true;
        atomic_fetch_add(&s->tls->handshakes, 1);
        return PT_SOCK_DONE;
    }
    return failed(s, ret, errbuf, errlen);
}

/* A plain recv or send (MSG_NOSIGNAL): bytes, WANT_* or ERROR. */
static ssize_t plain_io(pt_sock *s, void *buf, size_t len, bool writing, char *errbuf,
                        size_t errlen) {
    for (;;) {
        ssize_t n = writing ? send(s->fd, buf, len, MSG_NOSIGNAL) : recv(s->fd, buf, len, 0);
        if (n > 0)
            return n;
        if (n == 0 && !writing) {
            snprintf(errbuf, errlen, "redis: %s", "the server closed the connection");
            return PT_SOCK_ERROR;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK)
            return writing ? PT_SOCK_WANT_WRITE : PT_SOCK_WANT_READ;
        snprintf(errbuf, errlen, "redis: %s: %s", writing ? "send" : "recv", strerror(errno));
        return PT_SOCK_ERROR;
    }
}

/* SSL_read or SSL_write, after the handshake: bytes, WANT_* or ERROR. */
static ssize_t tls_io(pt_sock *s, void *buf, size_t len, bool writing, char *errbuf,
                      size_t errlen) {
    int st = pt_sock_handshake(s, errbuf, errlen);
    if (st != PT_SOCK_DONE)
        return st;
    ERR_clear_error();
    errno = 0;
    int cap = len > INT32_MAX ? INT32_MAX : (int)len;
    int n = writing ? SSL_write(s->ssl, buf, cap) : SSL_read(s->ssl, buf, cap);
    if (n > 0 && !writing)
        s->got_data = true;
    return n > 0 ? n : failed(s, n, errbuf, errlen);
}

ssize_t pt_sock_read(pt_sock *s, void *buf, size_t len, char *errbuf, size_t errlen) {
    return s->ssl == NULL ? plain_io(s, buf, len, false, errbuf, errlen)
                          : tls_io(s, buf, len, false, errbuf, errlen);
}

ssize_t pt_sock_write(pt_sock *s, const void *buf, size_t len, char *errbuf, size_t errlen) {
    /* Not written to: the cast only shares the code with reads. */
    return s->ssl == NULL ? plain_io(s, (void *)buf, len, true, errbuf, errlen)
                          : tls_io(s, (void *)buf, len, true, errbuf, errlen);
}

/* SSL_has_pending, not SSL_pending: with read-ahead, a record not yet
 * decrypted waits in OpenSSL's buffer, and the fd will not announce it. */
bool pt_sock_pending(const pt_sock *s) {
    return s->ssl != NULL && SSL_has_pending(s->ssl) == 1;
}

bool pt_sock_stale(pt_sock *s) {
    if (pt_sock_pending(s))
        return true;
    char byte, err[8];
    if (s->ssl == NULL) {
        ssize_t n = recv(s->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    /* Reading consumes the records that carry no data; a byte of data here
     * is unasked for anyway (the connection is out of step). */
    return pt_sock_read(s, &byte, 1, err, sizeof(err)) != PT_SOCK_WANT_READ;
}

bool pt_tls_record_byte(int first_byte) {
    return first_byte == 0x15 || first_byte == 0x16;
}
