/* log.c — one formatted line per call, written with one write(2) so lines
 * from several workers do not interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048

static pd_log_level max_level = PD_LOG_INFO;
static pd_log_format format = PD_LOG_TEXT;
static bool to_journal;
static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const format_names[] = {"text", "json"};
/* syslog priorities (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG) */
static const int level_priority[] = {3, 4, 6, 7};

/* The index of name in names[0..n), or -1. */
static int find_name(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (name != NULL && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void pd_log_set_level(pd_log_level level) {
    max_level = level;
}

int pd_log_parse_level(const char *name) {
    return find_name(level_names, 4, name);
}

void pd_log_set_format(pd_log_format f) {
    format = f;
}

int pd_log_parse_format(const char *name) {
    return find_name(format_names, 2, name);
}

/* $JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected to
 * stdout/stderr; it only counts if stderr is still that stream. */
bool pd_log_init(void) {
    const char *env = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    char extra;
    to_journal = env != NULL && sscanf(env, "%llu:%llu%c", &dev, &ino, &extra) == 2 &&
                 fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
                 (unsigned long long)st.st_ino == ino;
    return to_journal;
}

/* Appends s to buf[*n..cap) as the inside of a JSON string; stops short of
 * cap rather than cut an escape in half. */
static void append_json(char *buf, size_t *n, size_t cap, const char *s) {
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof(esc), "\\%c", c);
        else if (c == '\n')
            snprintf(esc, sizeof(esc), "\\n");
        else if (c == '\t')
            snprintf(esc, sizeof(esc), "\\t");
        else if (c < 0x20 || c == 0x7f)
            snprintf(esc, sizeof(esc), "\\u%04x", c);
        else
            esc[0] = (char)c, esc[1] = '\0';
        size_t len = strlen(esc);
        if (*n + len >= cap)
            return;
        memcpy(buf + *n, esc, len);
        *n += len;
    }
}

void pd_log(pd_log_level level, const char *fmt, ...) {
    if (level > max_level)
        return;
    char msg[1024], line[LINE_MAX_BYTES], stamp[32];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof(msg), fmt, ap); /* a long message is cut */
    va_end(ap);
    if (m < 0)
        msg[0] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);

    size_t n = 0, cap = sizeof(line) - 1; /* room kept for the newline */
    if (to_journal)
        n = (size_t)snprintf(line, cap, "<%d>", level_priority[level]);
    if (format == PD_LOG_JSON) {
        n += (size_t)snprintf(line + n, cap - n,
                              "{\"time\":\"%s\",\"level\":\"%s\",\"pid\":%d,\"msg\":\"", stamp,
                              level_names[level], (int)getpid());
        append_json(line, &n, cap - 2, msg);
        line[n++] = '"';
        line[n++] = '}';
    } else if (to_journal) { /* the journal records the time and pid itself */
        n += (size_t)snprintf(line + n, cap - n, "%s: %s", level_names[level], msg);
    } else {
        n += (size_t)snprintf(line + n, cap - n, "%s porteirod[%d] %s: %s", stamp, (int)getpid(),
                              level_names[level], msg);
    }
    if (n > cap)
        n = cap;
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, n);
    (void)ignored;
}
