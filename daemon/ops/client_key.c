/* client_key.c — address parsing, ranges, and the X-Forwarded-For walk. */
#include "client_key.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static size_t count_char(const char *s, size_t len, char c) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == c;
    return n;
}

int pd_addr_parse(const char *text, size_t len, int *family, uint8_t addr[16]) {
    char buf[64];
    while (len > 0 && (*text == ' ' || *text == '\t'))
        text++, len--;
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    if (text[0] == '[') { /* [v6] or [v6]:port */
        const char *end = memchr(text, ']', len);
        if (end == NULL || (end + 1 != text + len && end[1] != ':'))
            return -1;
        len = (size_t)(end - text - 1);
        text++;
    } else if (count_char(text, len, ':') == 1 && memchr(text, '.', len) != NULL) {
        len = (size_t)((const char *)memchr(text, ':', len) - text); /* v4:port */
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    memset(addr, 0, 16);
    if (inet_pton(AF_INET, buf, addr) == 1) {
        *family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, addr) != 1)
        return -1;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(addr, mapped, 12) == 0) {
        memmove(addr, addr + 12, 4);
        memset(addr + 4, 0, 12);
        *family = AF_INET;
        return 0;
    }
    *family = AF_INET6;
    return 0;
}

int pd_cidr_parse(const char *text, pd_cidr *out) {
    const char *slash = strchr(text, '/');
    size_t len = slash != NULL ? (size_t)(slash - text) : strlen(text);
    if (pd_addr_parse(text, len, &out->family, out->addr) != 0)
        return -1;
    int max = out->family == AF_INET ? 32 : 128;
    out->prefix = max;
    if (slash != NULL) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || bits < 0 || bits > max)
            return -1;
        out->prefix = (int)bits;
    }
    return 0;
}

bool pd_cidr_contains(const pd_cidr *range, int family, const uint8_t addr[16]) {
    if (range->family != family)
        return false;
    int full = range->prefix / 8, rest = range->prefix % 8;
    if (memcmp(range->addr, addr, (size_t)full) != 0)
        return false;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return rest == 0 || (range->addr[full] & mask) == (addr[full] & mask);
}

static bool trusted_hop(const pd_cidr *trusted, size_t n, int family, const uint8_t addr[16]) {
    for (size_t i = 0; i < n; i++)
        if (pd_cidr_contains(&trusted[i], family, addr))
            return true;
    return false;
}

static void format_key(int family, const uint8_t addr[16], char *out, size_t outlen) {
    char text[INET6_ADDRSTRLEN];
    if (family == AF_INET) {
        inet_ntop(AF_INET, addr, text, sizeof(text));
        snprintf(out, outlen, "%s", text);
        return;
    }
    uint8_t net[16] = {0};
    memcpy(net, addr, 8); /* the /64 the address belongs to */
    inet_ntop(AF_INET6, net, text, sizeof(text));
    snprintf(out, outlen, "%s/64", text);
}

int pd_client_key(const char *peer, const char *xff, const pd_cidr *trusted, size_t ntrusted,
                  char *out, size_t outlen) {
    int family;
    uint8_t addr[16];
    if (peer == NULL || pd_addr_parse(peer, strlen(peer), &family, addr) != 0)
        return -1;
    /* Right to left: each entry was appended by the hop to its right; the
     * first one not ours is the client. Only a trusted peer is believed, and
     * an unparsable entry ends the walk at the last hop we could name. */
    const char *end = xff != NULL ? xff + strlen(xff) : NULL;
    while (end != NULL && trusted_hop(trusted, ntrusted, family, addr)) {
        const char *start = end;
        while (start > xff && start[-1] != ',')
            start--;
        int f;
        uint8_t a[16];
        if (pd_addr_parse(start, (size_t)(end - start), &f, a) != 0)
            break;
        family = f;
        memcpy(addr, a, 16);
        if (start == xff)
            break;
        end = start - 1;
    }
    format_key(family, addr, out, outlen);
    return 0;
}
