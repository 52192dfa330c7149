/* siphash.c — SipHash-2-4 and the process's key (siphash.h): porteirod's
 * copy of the library's src/core/siphash.c (daemon/ uses the library
 * through its public headers only); tests/core/test_siphash.c checks both
 * against the paper's reference vectors. */
#include "siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t rotl(uint64_t x, int b) {
    return (x << b) | (x >> (64 - b));
}

static uint64_t load64(const uint8_t *p) { /* little-endian, whatever the host */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = rotl(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = rotl(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = rotl(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = rotl(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = rotl(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = rotl(v2, 32);                                                                         \
    } while (0)

uint64_t pd_siphash(const uint8_t key[PD_SIPHASH_KEY_LEN], const void *data, size_t len) {
    const uint8_t *in = data;
    uint64_t k0 = load64(key), k1 = load64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    const uint8_t *end = in + (len - len % 8);
    for (; in != end; in += 8) {
        uint64_t m = load64(in);
        v3 ^= m;
        SIPROUND; /* c = 2 compression rounds */
        SIPROUND;
        v0 ^= m;
    }
    /* The last block: the bytes left, and the length's low byte on top. */
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < len % 8; i++)
        b |= (uint64_t)in[i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND; /* d = 4 finalization rounds */
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint8_t process_key[PD_SIPHASH_KEY_LEN];
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* 16 random bytes: getrandom() (which waits, once, for the kernel's pool
 * at early boot), else /dev/urandom, else, never in practice, the clocks
 * and addresses (unpredictable enough to spread keys, not to be secret). */
static void draw_key(void) {
    size_t got = 0;
    while (got < sizeof(process_key)) {
        ssize_t n = getrandom(process_key + got, sizeof(process_key) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got == sizeof(process_key))
        return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    for (got = 0; fd >= 0 && got < sizeof(process_key);) {
        ssize_t n = read(fd, process_key + got, sizeof(process_key) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    if (got == sizeof(process_key))
        return;
    struct timespec a, b;
    clock_gettime(CLOCK_REALTIME, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t seed[2] = {(uint64_t)a.tv_sec * 1000000000u + (uint64_t)a.tv_nsec,
                        ((uint64_t)b.tv_nsec << 32) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)&a};
    uint8_t k[PD_SIPHASH_KEY_LEN] = {0};
    memcpy(k, seed, sizeof(k));
    seed[0] = pd_siphash(k, seed, sizeof(seed));
    seed[1] = pd_siphash(k, &seed[0], sizeof(seed[0]));
    memcpy(process_key, seed, sizeof(process_key));
}

const uint8_t *pd_keyed_hash_key(void) {
    pthread_once(&key_once, draw_key);
    return process_key;
}

uint64_t pd_keyed_hash(const void *data, size_t len) {
    return pd_siphash(pd_keyed_hash_key(), data, len);
}
