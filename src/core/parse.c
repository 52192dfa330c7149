/* parse.c — text forms users write: durations and compact limits. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "porteiro.h"

static porteiro_status parse_fail(char *errbuf, size_t errlen, const char *fmt, const char *what) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, fmt, what);
    return PORTEIRO_ERR_INVALID;
}

/* A positive decimal integer of at most 18 digits; *end gets the first
 * character after it. */
static int parse_count(const char *s, int64_t *out, const char **end) {
    int64_t v = 0;
    int digits = 0;
    while (isdigit((unsigned char)*s)) {
        if (++digits > 18)
            return -1;
        v = v * 10 + (*s++ - '0');
    }
    *end = s;
    *out = v;
    return digits > 0 ? 0 : -1;
}

porteiro_status porteiro_parse_duration(const char *text, int64_t *ms) {
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    int64_t n;
    const char *unit;

    if (text == NULL || ms == NULL || parse_count(text, &n, &unit) != 0 || n <= 0)
        return PORTEIRO_ERR_INVALID;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(unit, units[i].unit) != 0)
            continue;
        if (n > PORTEIRO_MAX_PERIOD_MS / units[i].ms)
            return PORTEIRO_ERR_INVALID;
        *ms = n * units[i].ms;
        return PORTEIRO_OK;
    }
    return PORTEIRO_ERR_INVALID;
}

/* Splits off the next whitespace-separated word of s into word (cap bytes). */
static const char *next_word(const char *s, char *word, size_t cap) {
    size_t n = 0;
    while (isspace((unsigned char)*s))
        s++;
    while (*s != '\0' && !isspace((unsigned char)*s)) {
        if (n + 1 < cap)
            word[n] = *s;
        n++;
        s++;
    }
    /* An over-long word reads as "", which no caller accepts. */
    word[n < cap ? n : 0] = '\0';
    return n == 0 ? NULL : s;
}

porteiro_status porteiro_parse_limit(const char *text, porteiro_limit *out, char *errbuf,
                                     size_t errlen) {
    char alg[32], rate[64], word[32];
    const char *s = text;
    const char *slash;
    int64_t n;
    const char *end;

    if (text == NULL || out == NULL)
        return parse_fail(errbuf, errlen, "%s", "no limit given");
    memset(out, 0, sizeof(*out));
    if ((s = next_word(s, alg, sizeof(alg))) == NULL)
        return parse_fail(errbuf, errlen, "limit '%s': expected 'ALGORITHM L/DURATION [burst B]'",
                          text);
    out->algorithm = porteiro_algorithm_parse(alg);
    if (out->algorithm == 0)
        return parse_fail(errbuf, errlen, "unknown algorithm '%s'", alg);
    if ((s = next_word(s, rate, sizeof(rate))) == NULL || (slash = strchr(rate, '/')) == NULL)
        return parse_fail(errbuf, errlen, "limit '%s': expected L/DURATION after the algorithm",
                          text);
    if (parse_count(rate, &out->limit, &end) != 0 || end != slash)
        return parse_fail(errbuf, errlen, "limit '%s': L must be a positive integer", text);
    if (porteiro_parse_duration(slash + 1, &out->period_ms) != PORTEIRO_OK)
        return parse_fail(errbuf, errlen,
                          "limit '%s': the period must be an integer with a unit (ms, s, m, h, d)",
                          text);
    const char *rest = next_word(s, word, sizeof(word));
    if (rest != NULL) {
        if (strcmp(word, "burst") != 0)
            return parse_fail(errbuf, errlen, "limit '%s': only 'burst B' may follow L/DURATION",
                              text);
        if ((rest = next_word(rest, word, sizeof(word))) == NULL ||
            parse_count(word, &n, &end) != 0 || *end != '\0' || n <= 0)
            return parse_fail(errbuf, errlen, "limit '%s': burst must be a positive integer", text);
        if (out->algorithm != PORTEIRO_TOKEN_BUCKET && out->algorithm != PORTEIRO_GCRA)
            return parse_fail(errbuf, errlen,
                              "limit '%s': burst applies only to token_bucket and gcra", text);
        out->burst = n;
        if (next_word(rest, word, sizeof(word)) != NULL)
            return parse_fail(errbuf, errlen, "limit '%s': unexpected text after the burst", text);
    }
    return porteiro_limit_validate(out, errbuf, errlen);
}

porteiro_status porteiro_parse_limits(const char *text, porteiro_limit *out, size_t max, size_t *n,
                                      char *errbuf, size_t errlen) {
    char one[256];
    if (n != NULL)
        *n = 0;
    if (text == NULL || out == NULL || n == NULL)
        return parse_fail(errbuf, errlen, "%s", "no limits given");
    for (const char *s = text;;) {
        size_t len = strcspn(s, ",");
        if (len >= sizeof(one))
            return parse_fail(errbuf, errlen, "%s", "a limit is longer than 255 characters");
        if (*n == max)
            return parse_fail(errbuf, errlen, "%s", "too many limits (at most 8)");
        memcpy(one, s, len);
        one[len] = '\0';
        porteiro_status st = porteiro_parse_limit(one, &out[*n], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        (*n)++;
        if (s[len] == '\0')
            return PORTEIRO_OK;
        s += len + 1;
    }
}
