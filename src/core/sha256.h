/* sha256.h — SHA-256 (FIPS 180-4), for the digest of a client key too long
 * or too odd to be written into a Redis key as it is (core/call.c). Pure:
 * core is compiled into the Redis module too, which links no OpenSSL. */
#ifndef PT_SHA256_H
#define PT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define PT_SHA256_LEN 32

typedef struct pt_sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t used; /* bytes in buf */
} pt_sha256_ctx;

void pt_sha256_init(pt_sha256_ctx *s);
void pt_sha256_update(pt_sha256_ctx *s, const void *data, size_t len);
void pt_sha256_final(pt_sha256_ctx *s, uint8_t out[PT_SHA256_LEN]);

/* The digest of data, len bytes, in one call. */
void pt_sha256(const void *data, size_t len, uint8_t out[PT_SHA256_LEN]);

#endif
