/* top_view.c — the screen of `porteiro top` (top_view.h). */
#include "top_view.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define RED "\033[31;1m"
#define GREEN "\033[32;1m"
#define YELLOW "\033[33;1m"
#define DIM "\033[2m"
#define BOLD "\033[1m"
#define OFF "\033[0m"
#define EOL "\033[K\n" /* erase what a longer line left there */

static const char *c(const top_view *v, const char *code) {
    return v->color ? code : "";
}

/* The code point of the well-formed UTF-8 sequence at s (NUL-terminated),
 * its length in *len; -1 with *len 1 for a byte that starts none. */
static long utf8_decode(const unsigned char *s, size_t *len) {
    *len = 1;
    if (s[0] < 0x80)
        return s[0];
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                              : 0;
    if (n == 0)
        return -1;
    long cp = s[0] & (0x3f >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const long least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return -1;
    *len = n;
    return cp;
}

/* What a terminal would act on rather than show: C0 controls (ESC), DEL,
 * C1 controls (U+009B is a CSI of its own), and the bidirectional
 * formatting characters, which reorder the text shown after them. */
static bool unsafe_code_point(long cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void top_view_safe(char *dst, size_t cap, const char *key, int width) {
    size_t max_chars = width > 1 ? (size_t)width : cap - 1;
    size_t n = 0, chars = 0, last = 0; /* last: where the last character began */
    const unsigned char *s = (const unsigned char *)key;
    bool cut = false;
    while (*s != '\0') {
        size_t len;
        long cp = utf8_decode(s, &len);
        bool bad = cp < 0 || unsafe_code_point(cp);
        size_t out = bad ? 1 : len;
        if (chars == max_chars || n + out >= cap) {
            cut = true;
            break;
        }
        last = n;
        if (bad)
            dst[n++] = '?';
        else
            for (size_t i = 0; i < len; i++)
                dst[n++] = (char)s[i];
        chars++;
        s += len;
    }
    if (cut && chars > 0) { /* the last character shown gives way to '~' */
        n = last;
        dst[n++] = '~';
    }
    dst[n] = '\0';
}

static double num(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0;
}
static const char *str(const json_t *o, const char *k, const char *dflt) {
    const char *s = json_string_value(json_object_get(o, k));
    return s != NULL ? s : dflt;
}

static void fmt_rate(char *b, size_t n, double v) {
    if (v >= 10000)
        snprintf(b, n, "%.0fk", v / 1000);
    else if (v >= 1000)
        snprintf(b, n, "%.1fk", v / 1000);
    else if (v >= 100 || v == 0)
        snprintf(b, n, "%.0f", v);
    else
        snprintf(b, n, "%.*f", v >= 10 ? 1 : 2, v);
}
static void fmt_us(char *b, size_t n, double us) {
    if (us >= 1e6)
        snprintf(b, n, "%.2f s", us / 1e6);
    else if (us >= 1000)
        snprintf(b, n, "%.*f ms", us >= 10000 ? 0 : 1, us / 1000);
    else
        snprintf(b, n, "%.0f µs", us);
}
static void fmt_duration(char *b, size_t n, double s) {
    long t = s > 0 ? (long)s : 0;
    if (t >= 86400)
        snprintf(b, n, "%ldd %ldh", t / 86400, t % 86400 / 3600);
    else if (t >= 3600)
        snprintf(b, n, "%ldh %ldm", t / 3600, t % 3600 / 60);
    else if (t >= 60)
        snprintf(b, n, "%ldm %lds", t / 60, t % 60);
    else
        snprintf(b, n, "%lds", t);
}
static void fmt_utc(char *b, size_t n, double ms) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || gmtime_r(&t, &tm) == NULL || strftime(b, n, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(b, n, "-");
}

static const json_t *policy_in(const json_t *status, const char *name) {
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(status, "policies"), i, p) {
        if (strcmp(str(p, "policy", ""), name) == 0)
            return p;
    }
    return NULL;
}

/* The worst news first, as the page's pill. */
static void draw_title(FILE *out, const top_view *v, const top_sample *cur,
                       const top_sample *prev) {
    const json_t *s = cur->status;
    size_t down = 0, i;
    const json_t *n;
    json_array_foreach(json_object_get(s, "redis"), i, n) {
        if (!json_is_true(json_object_get(n, "up")) || strcmp(str(n, "breaker", ""), "open") == 0)
            down++;
    }
    bool fallback = false;
    const json_t *p;
    json_array_foreach(json_object_get(s, "policies"), i, p) {
        const json_t *q = prev->status ? policy_in(prev->status, str(p, "policy", "")) : NULL;
        if (q != NULL && num(p, "fallback") > num(q, "fallback"))
            fallback = true;
    }
    const json_t *cfg = json_object_get(s, "config");
    char state[64];
    const char *col = GREEN;
    if (v->error != NULL)
        col = RED, snprintf(state, sizeof(state), "UNREACHABLE");
    else if (down > 0)
        col = RED, snprintf(state, sizeof(state), "REDIS DOWN (%zu)", down);
    else if (fallback)
        col = YELLOW, snprintf(state, sizeof(state), "FALLBACK");
    else if (json_is_string(json_object_get(cfg, "last_error")))
        col = YELLOW, snprintf(state, sizeof(state), "RELOAD FAILED");
    else
        snprintf(state, sizeof(state), "OK");
    char up[32];
    fmt_duration(up, sizeof(up), num(s, "uptime_s"));
    fprintf(out, "%sporteirod %s%s  up %s  %s  [%s%s%s]" EOL, c(v, BOLD), str(s, "version", "?"),
            c(v, OFF), up, v->admin, c(v, col), state, c(v, OFF));
    char error[512];
    if (v->error != NULL)
        top_view_safe(error, sizeof(error), v->error, 0);
    if (v->error != NULL)
        fprintf(out, "%s%s (the numbers below are from the last answer)%s" EOL, c(v, RED), error,
                c(v, OFF));
    char loaded[64], ago[32];
    fmt_utc(loaded, sizeof(loaded), num(cfg, "loaded_at_ms"));
    fmt_duration(ago, sizeof(ago), (num(s, "now_ms") - num(cfg, "loaded_at_ms")) / 1000);
    fprintf(out, "config %s  loaded %s (%s ago)  %.0f reloads", str(cfg, "path", "-"), loaded, ago,
            num(cfg, "reloads"));
    if (num(cfg, "reloads_failed") > 0)
        fprintf(out, " %s(%.0f failed)%s", c(v, RED), num(cfg, "reloads_failed"), c(v, OFF));
    fputs(EOL, out);
    const char *err = str(cfg, "last_error", NULL);
    if (err != NULL) {
        char safe[512];
        top_view_safe(safe, sizeof(safe), err, v->width - 20);
        fprintf(out, "%slast reload failed: %s%s" EOL, c(v, RED), safe, c(v, OFF));
    }
}

static void draw_policies(FILE *out, const top_view *v, const top_sample *cur,
                          const top_sample *prev) {
    fprintf(out, EOL "%s%-24s %10s %10s %10s %8s%s" EOL, c(v, DIM), "POLICY", "ALLOWED/s",
            "DENIED/s", "FALLBACK/s", "DENIED", c(v, OFF));
    double dt = (double)(cur->at_ms - prev->at_ms) / 1000;
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(cur->status, "policies"), i, p) {
        const char *name = str(p, "policy", "?");
        const json_t *q = prev->status ? policy_in(prev->status, name) : NULL;
        char a[16] = "-", d[16] = "-", f[16] = "-", share[16] = "-", safe[64];
        double ra = 0, rd = 0, rf = 0;
        if (q != NULL && dt > 0) { /* a counter that went down: porteirod restarted */
            ra = fmax(0, (num(p, "allowed") - num(q, "allowed")) / dt);
            rd = fmax(0, (num(p, "denied") - num(q, "denied")) / dt);
            rf = fmax(0, (num(p, "fallback") - num(q, "fallback")) / dt);
            fmt_rate(a, sizeof(a), ra);
            fmt_rate(d, sizeof(d), rd);
            fmt_rate(f, sizeof(f), rf);
            if (ra + rd > 0)
                snprintf(share, sizeof(share), "%.1f%%", 100 * rd / (ra + rd));
            else
                snprintf(share, sizeof(share), "idle");
        }
        top_view_safe(safe, sizeof(safe), name, 24);
        fprintf(out, "%-24s %s%10s%s %s%10s%s %s%10s%s %8s" EOL, safe, c(v, GREEN), a, c(v, OFF),
                rd > 0 ? c(v, RED) : "", d, c(v, OFF), rf > 0 ? c(v, YELLOW) : "", f, c(v, OFF),
                share);
    }
}

static void draw_nodes(FILE *out, const top_view *v, const json_t *status) {
    const json_t *nodes = json_object_get(status, "redis");
    fprintf(out, EOL "%s%-32s %-8s %-10s %s%s" EOL, c(v, DIM), "REDIS NODE", "STATE", "BREAKER",
            "DECIDES", c(v, OFF));
    if (json_array_size(nodes) == 0)
        fprintf(out, "(none: the memory backend decides)" EOL);
    size_t i;
    const json_t *n;
    json_array_foreach(nodes, i, n) {
        const char *breaker = str(n, "breaker", "?");
        bool down = !json_is_true(json_object_get(n, "up")) || strcmp(breaker, "open") == 0;
        bool probing = !down && strcmp(breaker, "half_open") == 0;
        char safe[64];
        top_view_safe(safe, sizeof(safe), str(n, "node", "?"), 32);
        fprintf(out, "%-32s %s%-8s%s %-10s %s" EOL, safe,
                c(v, down      ? RED
                     : probing ? YELLOW
                               : GREEN),
                down      ? "DOWN"
                : probing ? "PROBING"
                          : "UP",
                c(v, OFF), breaker,
                strcmp(str(n, "decides", ""), "module") == 0 ? "module" : "scripts");
    }
}

/* The round trips of the last 60 s (since start until then), by bucket. */
static void draw_latency(FILE *out, const top_view *v, const json_t *status) {
    const json_t *lat = json_object_get(status, "latency");
    const json_t *counts = json_object_get(lat, "counts"),
                 *bounds = json_object_get(lat, "bounds_us");
    size_t n = json_array_size(counts);
    if (n == 0 || n > TOP_LATENCY_MAX)
        return;
    double d[TOP_LATENCY_MAX], total = 0;
    bool windowed = v->base_n == n;
    for (size_t i = 0; i < n; i++) {
        double now = json_number_value(json_array_get(counts, i));
        d[i] = windowed && now >= (double)v->base_counts[i] ? now - (double)v->base_counts[i] : now;
        total += d[i];
    }
    char label[TOP_LATENCY_MAX][24];
    for (size_t i = 0; i < n; i++) {
        char us[16];
        size_t b = i < json_array_size(bounds) ? i : json_array_size(bounds) - 1;
        fmt_us(us, sizeof(us), json_number_value(json_array_get(bounds, b)));
        snprintf(label[i], sizeof(label[i]), "%s%s", i < json_array_size(bounds) ? "≤" : ">", us);
    }
    char p50[24] = "-", p99[24] = "-";
    double acc = 0;
    for (size_t i = 0; i < n && total > 0; i++) {
        acc += d[i];
        if (p50[0] == '-' && acc >= 0.5 * total)
            memcpy(p50, label[i], sizeof(p50));
        if (p99[0] == '-' && acc >= 0.99 * total)
            memcpy(p99, label[i], sizeof(p99));
    }
    char span[32] = "since start";
    if (windowed)
        snprintf(span, sizeof(span), "last %.0f s", (double)v->base_age_ms / 1000);
    fprintf(out, EOL "%sREDIS ROUND TRIPS (%s)%s  p50 %s  p99 %s  %.0f round trips" EOL, c(v, DIM),
            span, c(v, OFF), p50, p99, total);
    int col = 0;
    for (size_t i = 0; i < n && total > 0; i++) {
        if (d[i] == 0)
            continue;
        char cell[48];
        int w = snprintf(cell, sizeof(cell), "%s %.0f%%  ", label[i], 100 * d[i] / total);
        if (col > 0 && col + w > v->width) {
            fputs(EOL, out);
            col = 0;
        }
        fputs(cell, out);
        col += w;
    }
    if (col > 0)
        fputs(EOL, out);
}

static void draw_top(FILE *out, const top_view *v, const json_t *top, int rows) {
    const char *outcome = str(top, "outcome", "denied");
    fprintf(out,
            EOL "%sTOP %s KEYS (last %s, %.0f counters per policy; a count is at most its "
                "error above the truth)%s" EOL,
            c(v, DIM),
            strcmp(outcome, "allowed") == 0 ? "ALLOWED"
            : strcmp(outcome, "used") == 0  ? "USED (TOKENS)"
                                            : "DENIED",
            str(top, "window", "1m"), num(top, "k"), c(v, OFF));
    int keyw = v->width - 24 - 12 - 10 - 3;
    if (keyw < 16)
        keyw = 16;
    if (keyw > 64)
        keyw = 64;
    fprintf(out, "%-24s %-*s %12s %10s" EOL, "POLICY", keyw, "KEY", "COUNT", "±ERROR");
    size_t i, j;
    const json_t *p, *k;
    int shown = 0;
    /* Each policy gets its share of the rows, 3 at least, 10 at most (the page's). */
    size_t npol = json_array_size(json_object_get(top, "policies"));
    int per = npol > 0 ? rows / (int)npol : rows;
    per = per < 3 ? 3 : per > 10 ? 10 : per;
    json_array_foreach(json_object_get(top, "policies"), i, p) {
        char pol[64];
        top_view_safe(pol, sizeof(pol), str(p, "policy", "?"), 24);
        json_array_foreach(json_object_get(p, "keys"), j, k) {
            if ((int)j >= per)
                break;
            char key[256], err[24] = "exact";
            top_view_safe(key, sizeof(key), str(k, "key", ""), keyw);
            if (num(k, "error") > 0)
                snprintf(err, sizeof(err), "±%.0f", num(k, "error"));
            fprintf(out, "%-24s %-*s %12.0f %10s" EOL, pol, keyw, key, num(k, "count"), err);
            shown++;
        }
    }
    if (shown == 0)
        fprintf(out, "(no %s keys in the last %s)" EOL, outcome, str(top, "window", "1m"));
    if (strcmp(str(top, "show", "raw"), "hash") == 0)
        fprintf(out, "%skeys shown as keyed hashes (top.show: hash)%s" EOL, c(v, DIM), c(v, OFF));
}

void top_view_draw(FILE *out, const top_view *v, const top_sample *cur, const top_sample *prev) {
    draw_title(out, v, cur, prev);
    draw_policies(out, v, cur, prev);
    draw_nodes(out, v, cur->status);
    draw_latency(out, v, cur->status);
    /* The rest of the screen for keys: the title, nodes and policies above
     * take about 14 lines plus one per policy and node. */
    int used = 14 + (int)json_array_size(json_object_get(cur->status, "policies")) +
               (int)json_array_size(json_object_get(cur->status, "redis"));
    int rows = v->height - used;
    draw_top(out, v, cur->top, rows < 3 ? 3 : rows);
    fprintf(out, "%sq quits  o denied/allowed/used  w 1m/10m%s", c(v, DIM), c(v, OFF));
}
