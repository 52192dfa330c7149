/* query.c — one parameter out of a query string (query.h). */
#include "query.h"

#include <string.h>
#include <strings.h>

static int hex(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes value[0, len) into out; -1 when it does not fit. */
static int decode(const char *value, size_t len, char *out, size_t outlen) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = value[i];
        if (ch == '+')
            ch = ' ';
        else if (ch == '%' && i + 2 < len && hex(value[i + 1]) >= 0 && hex(value[i + 2]) >= 0) {
            ch = (char)(hex(value[i + 1]) * 16 + hex(value[i + 2]));
            i += 2;
        }
        if (ch == '\0')
            break; /* a C string ends here */
        if (n + 1 >= outlen)
            return -1;
        out[n++] = ch;
    }
    if (outlen == 0)
        return -1;
    out[n] = '\0';
    return (int)n;
}

int pd_query_get(const char *query, const char *name, char *out, size_t outlen) {
    size_t name_len = strlen(name);
    const char *found = NULL;
    size_t found_len = 0;
    for (const char *p = query; *p != '\0';) {
        const char *amp = strchr(p, '&');
        size_t len = amp != NULL ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq == NULL || eq == p)
            return -1;
        if (found == NULL && (size_t)(eq - p) == name_len && strncasecmp(p, name, name_len) == 0) {
            found = eq + 1;
            found_len = len - name_len - 1;
        }
        p += len;
        if (*p == '&')
            p++;
    }
    return found != NULL ? decode(found, found_len, out, outlen) : -1;
}
