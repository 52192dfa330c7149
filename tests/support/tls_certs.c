/* tls_certs.c — a CA and certificates for the TLS tests (tls_certs.h). */
#include "tls_certs.h"

#include "redis_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* EC P-256 keys: fast to make. Certificates last 2 days. */
static const char script[] =
    "set -e; cd \"$1\"\n"
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out \"$1.key\"; }\n"
    "ca() { key \"$1\"; openssl req -x509 -new -key \"$1.key\" -subj \"/CN=porteiro test $1\" "
    "-days 2 -out \"$1.crt\"; }\n"
    "leaf() { key \"$1\"; openssl req -new -key \"$1.key\" -subj \"/CN=$1\" -out \"$1.csr\"\n"
    "  printf 'subjectAltName=%s\\n' \"$2\" > \"$1.ext\"\n"
    "  openssl x509 -req -in \"$1.csr\" -CA \"$3.crt\" -CAkey \"$3.key\" -CAcreateserial -days 2 "
    "-extfile \"$1.ext\" -out \"$1.crt\"; }\n"
    "ca ca; ca other-ca\n"
    "leaf server 'DNS:localhost,IP:127.0.0.1' ca\n"
    "leaf other-server 'DNS:localhost,IP:127.0.0.1' other-ca\n"
    "leaf wronghost 'DNS:redis.test' ca\n"
    "leaf client 'DNS:porteiro-client' ca\n"
    "key stray\n";

const char *test_certs_path(const test_certs *c, const char *name, char *buf, int len) {
    snprintf(buf, (size_t)len, "%s/%s", c->dir, name);
    return buf;
}

int test_certs_make(test_certs *c) {
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "/tmp/porteiro-tls-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        fprintf(stderr, "test_certs: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    char path[192], cmd[512];
    FILE *f = fopen(test_certs_path(c, "make.sh", path, sizeof(path)), "w");
    if (f == NULL)
        return -1;
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "sh %s/make.sh %s >%s/make.log 2>&1", c->dir, c->dir, c->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_certs: openssl failed (see %s/make.log)\n", c->dir);
        return -1;
    }
    struct {
        char *field;
        const char *name;
    } files[] = {
        {c->ca, "ca.crt"},
        {c->server_cert, "server.crt"},
        {c->server_key, "server.key"},
        {c->client_cert, "client.crt"},
        {c->client_key, "client.key"},
        {c->wronghost_cert, "wronghost.crt"},
        {c->wronghost_key, "wronghost.key"},
        {c->other_ca, "other-ca.crt"},
        {c->other_server_cert, "other-server.crt"},
        {c->other_server_key, "other-server.key"},
        {c->stray_key, "stray.key"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        test_certs_path(c, files[i].name, files[i].field, 192);
    return 0;
}

void test_certs_remove(test_certs *c) {
    if (c->dir[0] == '\0')
        return;
    char cmd[192];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_certs: could not remove %s\n", c->dir);
    c->dir[0] = '\0';
}

int test_tls_servers_start(test_certs *c, const test_tls_servers *s) {
    if (test_certs_make(c) != 0)
        return -1;
    if (test_redis_start_tls(s->srv, c->server_cert, c->server_key, c->ca, NULL, NULL) != 0 ||
        test_redis_start_tls(s->mtls, c->server_cert, c->server_key, c->ca,
                             "--tls-auth-clients yes", NULL) != 0 ||
        test_redis_start_tls(s->other, c->wronghost_cert, c->wronghost_key, c->ca, NULL, NULL) != 0)
        return -1;
    return 0;
}

void test_tls_servers_stop(test_certs *c, const test_tls_servers *s) {
    test_redis_stop(s->srv);
    test_redis_stop(s->mtls);
    test_redis_stop(s->other);
    test_certs_remove(c);
}
