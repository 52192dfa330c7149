/* redis_url.h — parsing of Redis target URLs (internal). */
#ifndef PT_REDIS_URL_H
#define PT_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

/* redis://[user:password@]host[:port][/db]   (port 6379, db 0 by default)
 * redis://[:password@]host...                (password only)
 * unix:///path/to/socket[?db=N]              (also accepted: unix:/path)
 * unix://[user]:password@/path/to/socket[?db=N] (a password-protected socket)
 * host may be an IPv6 literal in brackets: redis://[::1]:6380 */
typedef struct pt_redis_url {
    bool is_unix;
    char host[256];     /* or the socket path when is_unix */
    int port;
    int db;
    char user[128];     /* "" = no ACL user (AUTH password only) */
    char password[256]; /* "" = no AUTH */
} pt_redis_url;

/* Returns 0 on success; -1 with a message in errbuf (which never echoes the
 * password) on a malformed URL. */
int pt_redis_url_parse(const char *url, pt_redis_url *out, char *errbuf, size_t errlen);

#endif
