/* siphash.h — SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit
 * hash for the tables a client's bytes index. With a key the client does
 * not know, it cannot pick keys that share a bucket (a flood of long
 * chains walked under a lock) or that share a 64-bit hash (one key counted
 * under another's name). FNV-1a or a multiply-xor hash has no key: both can
 * be aimed from outside.
 *
 * pd_siphash takes the key as a parameter (no I/O; the unit test checks
 * the published vectors). pd_keyed_hash uses the process's own key: 16
 * bytes from getrandom() drawn once, at the first use, so every table of a
 * process (and every handle, whose top keys are merged by hash) agrees,
 * and no two processes do. */
#ifndef PD_SIPHASH_H
#define PD_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define PD_SIPHASH_KEY_LEN 16

/* SipHash-2-4 of data under key (16 bytes, read as two little-endian
 * 64-bit words, as the reference does). */
uint64_t pd_siphash(const uint8_t key[PD_SIPHASH_KEY_LEN], const void *data, size_t len);

/* SipHash-2-4 under the process's random key. Thread-safe. */
uint64_t pd_keyed_hash(const void *data, size_t len);

/* The process's key (drawn at the first call if need be), for a hash that
 * must continue over several pieces (pd_siphash over a joined buffer). */
const uint8_t *pd_keyed_hash_key(void);

#endif
