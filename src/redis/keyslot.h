/* keyslot.h — the Redis Cluster hash slot of a key: CRC16 of its hash tag.
 * Pure (no I/O): a connection to one cluster node needs it to keep a
 * batch's keys in one slot; the slot map itself is topology/slots.h. */
#ifndef PT_REDIS_KEYSLOT_H
#define PT_REDIS_KEYSLOT_H

#include <stddef.h>
#include <stdint.h>

#define PT_SLOTS 16384

/* CRC16-CCITT (XModem), the one Redis Cluster uses. */
uint16_t pt_crc16(const char *buf, size_t len);
/* The slot of a key: of the bytes between the first '{' and the first '}'
 * after it when that is not empty, else of the whole key. */
int pt_key_slot(const char *key, size_t len);

#endif
