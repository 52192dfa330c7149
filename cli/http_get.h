/* http_get.h — the least HTTP client `porteiro top` needs: GET over a
 * plain TCP socket to the admin listener (http:// only: the admin listener
 * is meant for loopback), with a time budget for the whole exchange. */
#ifndef CLI_HTTP_GET_H
#define CLI_HTTP_GET_H

#include <stddef.h>

/* "http://HOST[:PORT][/PREFIX]" split up. host holds an IPv6 address
 * without its brackets; prefix never ends with '/'. */
typedef struct http_url {
    char host[256];
    char port[8];
    char prefix[256];
} http_url;

/* Parses text into url. Returns 0, or -1 with a reason in err. */
int http_url_parse(const char *text, http_url *url, char *err, size_t errlen);

/* GETs url's prefix + path (e.g. "/v1/status") within timeout_ms. On
 * success returns 0 with the HTTP status in *status and the body in *body
 * (NUL-terminated, *len bytes, the caller frees it). On failure returns -1
 * with the reason in err ("connection refused", "timed out after 2000 ms",
 * ...) and nothing to free. Bodies over 8 MiB are refused. */
int http_get(const http_url *url, const char *path, int timeout_ms, int *status, char **body,
             size_t *len, char *err, size_t errlen);

#endif
