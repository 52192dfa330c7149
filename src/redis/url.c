/* url.c — parsing of redis:// and unix:// targets. */
#include "redis/url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"

static int fail(char *errbuf, size_t errlen, const char *msg) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "invalid redis url: %s", msg);
    return -1;
}

/* A decimal integer in [lo, hi] spanning exactly [s, s+len). */
static int parse_int(const char *s, size_t len, int lo, int hi, int *out) {
    long v = 0;
    if (len == 0 || len > 9)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* Copies [s, s+len) into a NUL-terminated field of cap bytes. */
static int copy_field(char *dst, size_t cap, const char *s, size_t len) {
    if (len >= cap)
        return -1;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

static int parse_userinfo(const char *s, size_t len, pt_redis_url *out);

/* The last "@/" ends the credentials (a password may hold '@' or '/'). */
static const char *unix_credentials_end(const char *s) {
    const char *end = NULL;
    for (const char *at = strstr(s, "@/"); at != NULL; at = strstr(at + 1, "@/"))
        end = at;
    return end;
}

static int parse_unix(const char *path, pt_redis_url *out, char *errbuf, size_t errlen) {
    const char *at = path[0] != '/' ? unix_credentials_end(path) : NULL;
    if (at != NULL) { /* unix://[user]:password@/path */
        if (parse_userinfo(path, (size_t)(at - path), out) != 0)
            return fail(errbuf, errlen, "user or password too long");
        path = at + 1;
    }
    const char *q = strchr(path, '?');
    size_t len = q != NULL ? (size_t)(q - path) : strlen(path);

    if (len == 0 || path[0] != '/')
        return fail(errbuf, errlen, "unix socket path must be absolute");
    if (copy_field(out->host, sizeof(out->host), path, len) != 0)
        return fail(errbuf, errlen, "unix socket path too long");
    if (q != NULL) {
        if (strncmp(q, "?db=", 4) != 0 ||
            parse_int(q + 4, strlen(q + 4), 0, 1000000, &out->db) != 0)
            return fail(errbuf, errlen, "only ?db=N may follow a unix socket path");
    }
    out->is_unix = true;
    return 0;
}

static int parse_userinfo(const char *s, size_t len, pt_redis_url *out) {
    const char *colon = memchr(s, ':', len);
    if (colon == NULL) /* redis://password@host is a common shorthand */
        return copy_field(out->password, sizeof(out->password), s, len);
    size_t ulen = (size_t)(colon - s);
    if (copy_field(out->user, sizeof(out->user), s, ulen) != 0)
        return -1;
    return copy_field(out->password, sizeof(out->password), colon + 1, len - ulen - 1);
}

int pt_url_node_parse(const char *s, size_t len, pt_url_node *out, char *errbuf, size_t errlen) {
    const char *end = s + len, *colon = NULL, *h = s, *hend;
    memset(out, 0, sizeof(*out));
    if (len > 0 && *s == '[') { /* [IPv6]:port */
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return fail(errbuf, errlen, "node: unterminated [IPv6] host");
        h = s + 1;
        hend = close;
        colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
        if (colon == NULL)
            return fail(errbuf, errlen, "node: a port must follow [IPv6]");
    } else {
        for (const char *c = s; c < end; c++)
            if (*c == ':')
                colon = c;
        hend = colon;
    }
    if (colon == NULL)
        return fail(errbuf, errlen, "node: host:port expected (no port)");
    if (hend == h)
        return fail(errbuf, errlen, "node: no host");
    if (copy_field(out->host, sizeof(out->host), h, (size_t)(hend - h)) != 0)
        return fail(errbuf, errlen, "node: host too long");
    if (parse_int(colon + 1, (size_t)(end - colon - 1), 1, 65535, &out->port) != 0)
        return fail(errbuf, errlen, "node: port must be 1..65535");
    return 0;
}

/* The comma-separated host:port list of [s, end) into out->nodes. */
static int parse_node_list(const char *s, const char *end, pt_redis_url *out, char *errbuf,
                           size_t errlen) {
    if (s == end)
        return fail(errbuf, errlen, "no host:port given");
    while (s <= end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *stop = comma != NULL ? comma : end;
        if (out->nnodes == PT_URL_MAX_NODES)
            return fail(errbuf, errlen, "more than 16 nodes");
        if (pt_url_node_parse(s, (size_t)(stop - s), &out->nodes[out->nnodes], errbuf, errlen) != 0)
            return -1;
        out->nnodes++;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
    return 0;
}

/* redis+cluster:// and redis+sentinel:// (the scheme already skipped). */
static int parse_multi(const char *s, pt_redis_url *out, char *errbuf, size_t errlen) {
    const char *end = s + strcspn(s, "/");
    const char *at = NULL;
    for (const char *c = s; c < end; c++)
        if (*c == '@')
            at = c;
    if (at != NULL) {
        if (parse_userinfo(s, (size_t)(at - s), out) != 0)
            return fail(errbuf, errlen, "user or password too long");
        s = at + 1;
    }
    if (parse_node_list(s, end, out, errbuf, errlen) != 0)
        return -1;
    if (out->kind == PT_URL_CLUSTER) {
        if (*end == '/' && end[1] != '\0')
            return fail(errbuf, errlen, "a cluster URL takes no path (cluster has only db 0)");
        return 0;
    }
    if (*end != '/' || end[1] == '\0' || end[1] == '/')
        return fail(errbuf, errlen, "sentinel URL needs /MASTER after the nodes");
    const char *name = end + 1, *slash = strchr(name, '/');
    size_t nlen = slash != NULL ? (size_t)(slash - name) : strlen(name);
    if (copy_field(out->master, sizeof(out->master), name, nlen) != 0)
        return fail(errbuf, errlen, "master name too long");
    if (slash != NULL && parse_int(slash + 1, strlen(slash + 1), 0, 1000000, &out->db) != 0)
        return fail(errbuf, errlen, "database (after /MASTER/) must be a number");
    return 0;
}

/* The length of name ("redis..." ) or of its TLS twin ("rediss...", *tls
 * set) at the start of url; 0 when neither. */
static size_t scheme(const char *url, const char *name, bool *tls) {
    size_t n = strlen(name);
    if (strncmp(url, name, n) == 0)
        return n;
    if (strncmp(url, "rediss", 6) == 0 && strncmp(url + 6, name + 5, n - 5) == 0) {
        *tls = true;
        return n + 1;
    }
    return 0;
}

int pt_redis_url_parse(const char *url, pt_redis_url *out, char *errbuf, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (url == NULL)
        return fail(errbuf, errlen, "empty");
    size_t skip = 0;
    if ((skip = scheme(url, "redis+cluster://", &out->tls)) > 0) {
        out->kind = PT_URL_CLUSTER;
        return parse_multi(url + skip, out, errbuf, errlen);
    }
    if ((skip = scheme(url, "redis+sentinel://", &out->tls)) > 0) {
        out->kind = PT_URL_SENTINEL;
        return parse_multi(url + skip, out, errbuf, errlen);
    }
    if (strncmp(url, "unix://", 7) == 0)
        return parse_unix(url + 7, out, errbuf, errlen);
    if (strncmp(url, "unix:", 5) == 0)
        return parse_unix(url + 5, out, errbuf, errlen);
    if ((skip = scheme(url, "redis://", &out->tls)) == 0)
        return fail(errbuf, errlen,
                    "must start with redis://, rediss://, unix://, redis[s]+cluster:// or "
                    "redis[s]+sentinel://");

    const char *s = url + skip;
    const char *end = s + strcspn(s, "/");
    const char *at = NULL;
    for (const char *c = s; c < end; c++)
        if (*c == '@')
            at = c; /* the last @: a password may contain one */
    if (at != NULL) {
        if (parse_userinfo(s, (size_t)(at - s), out) != 0)
            return fail(errbuf, errlen, "user or password too long");
        s = at + 1;
    }
    const char *port = NULL;
    if (*s == '[') { /* [IPv6]:port */
        const char *close = memchr(s, ']', (size_t)(end - s));
        if (close == NULL)
            return fail(errbuf, errlen, "unterminated [IPv6] host");
        if (copy_field(out->host, sizeof(out->host), s + 1, (size_t)(close - s - 1)) != 0)
            return fail(errbuf, errlen, "host too long");
        if (close + 1 < end && close[1] != ':')
            return fail(errbuf, errlen, "garbage after [IPv6] host");
        port = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = memchr(s, ':', (size_t)(end - s));
        const char *hend = colon != NULL ? colon : end;
        if (copy_field(out->host, sizeof(out->host), s, (size_t)(hend - s)) != 0)
            return fail(errbuf, errlen, "host too long");
        port = colon != NULL ? colon + 1 : NULL;
    }
    if (out->host[0] == '\0')
        return fail(errbuf, errlen, "no host");
    if (port != NULL && parse_int(port, (size_t)(end - port), 1, 65535, &out->port) != 0)
        return fail(errbuf, errlen, "port must be 1..65535");
    if (*end == '/' && end[1] != '\0' &&
        parse_int(end + 1, strlen(end + 1), 0, 1000000, &out->db) != 0)
        return fail(errbuf, errlen, "database must be a number");
    return 0;
}

porteiro_status porteiro_parse_redis_url(const char *url, char *errbuf, size_t errlen) {
    pt_redis_url parsed;
    return pt_redis_url_parse(url, &parsed, errbuf, errlen) == 0 ? PORTEIRO_OK
                                                                 : PORTEIRO_ERR_INVALID;
}
