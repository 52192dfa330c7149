/* client_key.h — the key of a client taken from its address: the TCP peer,
 * or, when the peer is a trusted proxy, the right-most untrusted hop of
 * X-Forwarded-For. IPv6 clients are keyed per /64 (one customer's network
 * usually spans a /64, so a per-address key would be trivial to evade). */
#ifndef PD_CLIENT_KEY_H
#define PD_CLIENT_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An address range: "10.0.0.0/8", "2001:db8::/32", or one address. */
typedef struct pd_cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    int prefix; /* bits */
} pd_cidr;

/* Parses a range; returns 0, or -1 when text is not one. */
int pd_cidr_parse(const char *text, pd_cidr *out);

/* Parses one address as found in X-Forwarded-For or a peer: "1.2.3.4",
 * "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443", "1.2.3.4:80".
 * IPv4-mapped IPv6 becomes IPv4. len bytes of text (no NUL needed). */
int pd_addr_parse(const char *text, size_t len, int *family, uint8_t addr[16]);

bool pd_cidr_contains(const pd_cidr *range, int family, const uint8_t addr[16]);

/* Writes the client key for peer (and the X-Forwarded-For value, or NULL)
 * into out: "203.0.113.7" or "2001:db8:1:2::/64". Returns 0, or -1 when
 * the peer address itself cannot be parsed. */
int pd_client_key(const char *peer, const char *xff, const pd_cidr *trusted, size_t ntrusted,
                  char *out, size_t outlen);

#endif
