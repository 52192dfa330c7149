/* url.h — parsing of Redis target URLs (internal). */
#ifndef PT_REDIS_URL_H
#define PT_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

/* redis://[user:password@]host[:port][/db]   (port 6379, db 0 by default)
 * rediss://..., rediss+cluster://..., rediss+sentinel://...
 *                                            (the same over TLS: tls.h)
 * redis://[:password@]host...                (password only)
 * unix:///path/to/socket[?db=N]              (also accepted: unix:/path)
 * unix://[user]:password@/path/to/socket[?db=N] (a password-protected socket)
 * host may be an IPv6 literal in brackets: redis://[::1]:6380
 * redis+cluster://[user:password@]host:port[,host:port...]
 *                                            (seed nodes of a Redis Cluster)
 * redis+sentinel://[user:password@]host:port[,host:port...]/MASTER[/DB]
 *                                            (sentinels and the master's name;
 *                                             the credentials are the data
 *                                             node's) */
#define PT_URL_MAX_NODES 16

typedef enum pt_url_kind {
    PT_URL_SINGLE = 0, /* one node: host/port or the unix socket */
    PT_URL_CLUSTER,    /* nodes[] are seeds; host/port unused */
    PT_URL_SENTINEL    /* nodes[] are sentinels; host/port: the master last found */
} pt_url_kind;

typedef struct pt_url_node {
    char host[256];
    int port;
} pt_url_node;

typedef struct pt_redis_url {
    pt_url_kind kind;
    size_t nnodes; /* cluster seeds or sentinels */
    pt_url_node nodes[PT_URL_MAX_NODES];
    char master[128];            /* sentinel: the master's name */
    char sentinel_password[256]; /* sentinel: AUTH for the sentinels ("" none) */
    bool is_unix;
    char host[256]; /* or the socket path when is_unix */
    int port;
    int db;
    char user[128];     /* "" = no ACL user (AUTH password only) */
    char password[256]; /* "" = no AUTH */
    bool tls;           /* the scheme said rediss */
    /* TLS to every node (the data nodes, the sentinels) when not NULL:
     * set by the handle (rediss:// or the tls option), borrowed, outlives
     * every connection made from this URL and its copies. */
    struct pt_tls *tls_conf;
    /* PT_URL_SENTINEL: how the connections find the master (locate.h),
     * set by the layer above (topology/router.c); static, never freed. */
    const struct pt_locator *locate;
} pt_redis_url;

/* Returns 0 on success; -1 with a message in errbuf (which never echoes the
 * password) on a malformed URL. */
int pt_redis_url_parse(const char *url, pt_redis_url *out, char *errbuf, size_t errlen);

/* "host:port" (or "[v6]:port") into a node; 0, or -1 with a message naming
 * the part. Used by the URL forms and by the YAML lists. */
int pt_url_node_parse(const char *s, size_t len, pt_url_node *out, char *errbuf, size_t errlen);

#endif
