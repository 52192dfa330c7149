/* resolve.h — the Redis host name turned into an address within a
 * deadline.
 *
 * getaddrinfo() cannot be interrupted (a slow DNS server holds it for
 * seconds), so a name is resolved on a helper thread and the caller waits
 * only until its deadline. An answer that comes late is kept for the next
 * caller; one resolution at most is in flight per target. An IP literal is
 * never resolved. The answer is cached, and resolved again (at most once a
 * second) after pt_resolver_forget: a failed connect or a demoted master may
 * mean the name now points elsewhere (DNS-based failover). */
#ifndef PT_REDIS_RESOLVE_H
#define PT_REDIS_RESOLVE_H

#include <netdb.h>
#include <stdint.h>

#include "porteiro.h"

#define PT_ADDR_LEN 64 /* room for any numeric IPv4 or IPv6 address */

typedef struct pt_resolver pt_resolver;

pt_resolver *pt_resolver_new(const char *host);
/* Safe while a resolution is in flight: the helper thread frees its part. */
void pt_resolver_free(pt_resolver *rs);

/* The numeric address of the host (IPv4 first, as hiredis does), in addr.
 * PORTEIRO_ERR_TIMEOUT when the deadline (CLOCK_MONOTONIC, us) passed
 * first, PORTEIRO_ERR_CONNECT when the name does not resolve. */
porteiro_status pt_resolver_get(pt_resolver *rs, int64_t deadline_us, char *addr, char *errbuf,
                                size_t errlen);
/* The cached address may be wrong now: resolve again (rate-limited). */
void pt_resolver_forget(pt_resolver *rs);

/* The resolver function, replaceable by tests (a slow DNS on demand). */
extern int (*pt_getaddrinfo)(const char *node, const char *service, const struct addrinfo *hints,
                             struct addrinfo **res);

#endif
