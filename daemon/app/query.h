/* query.h — one parameter out of a URL query string, percent-decoded. */
#ifndef PD_QUERY_H
#define PD_QUERY_H

#include <stddef.h>

/* Finds the first "name=value" pair of query (pairs split by '&', the name
 * matched case-insensitively and as is) and writes its value, with "%XX"
 * and '+' decoded, NUL-terminated into out. Returns the decoded length, or
 * -1 when the name is absent, when a pair lacks '=' or a name (the whole
 * query is then refused, as evhttp_parse_query_str did), or when the value
 * does not fit in outlen. A malformed escape is kept as is; "%00" ends the
 * value. */
int pd_query_get(const char *query, const char *name, char *out, size_t outlen);

#endif
