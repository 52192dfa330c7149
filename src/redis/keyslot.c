/* keyslot.c — the hash slot of a key (keyslot.h). */
#include "redis/keyslot.h"

#include <string.h>

uint16_t pt_crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    /* Bitwise, polynomial 0x1021, initial 0: 8 shifts a byte are cheap next
     * to a round trip, and need no table. */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int pt_key_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close != NULL && close > open + 1)
            return pt_crc16(open + 1, (size_t)(close - open - 1)) & (PT_SLOTS - 1);
    }
    return pt_crc16(key, len) & (PT_SLOTS - 1);
}
