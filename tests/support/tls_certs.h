/* tls_certs.h — a private CA and certificates for TLS tests, made with the
 * openssl command in a temporary folder (test support only).
 *
 * Files in dir: ca.crt/.key (the CA every good certificate is signed by),
 * server.crt/.key (localhost and 127.0.0.1), client.crt/.key (mTLS),
 * wronghost.crt/.key (only "redis.test", signed by ca), other-ca.crt/.key
 * (a CA nobody trusts) and other-server.crt/.key (127.0.0.1, signed by
 * other-ca), stray.key (a key that matches no certificate). */
#ifndef TEST_TLS_CERTS_H
#define TEST_TLS_CERTS_H

typedef struct test_certs {
    char dir[128];
    char ca[192], server_cert[192], server_key[192], client_cert[192], client_key[192];
    char wronghost_cert[192], wronghost_key[192], other_ca[192], other_server_cert[192],
        other_server_key[192], stray_key[192];
} test_certs;

/* 0, or -1 with a message on stderr. */
int test_certs_make(test_certs *c);
/* Removes the folder. */
void test_certs_remove(test_certs *c);
/* A path in the folder: dir/name. */
const char *test_certs_path(const test_certs *c, const char *name, char *buf, int len);

/* The TLS tests' servers, made from c: srv (TLS and a plain port, no
 * client certificate asked), mtls (client certificates required) and other
 * (the certificate for "redis.test" only). Needs "redis_server.h". */
struct test_redis;
typedef struct test_tls_servers {
    struct test_redis *srv, *mtls, *other;
} test_tls_servers;
/* Makes the certificates and starts the three: 0, or -1. */
int test_tls_servers_start(test_certs *c, const test_tls_servers *s);
void test_tls_servers_stop(test_certs *c, const test_tls_servers *s);

#endif
