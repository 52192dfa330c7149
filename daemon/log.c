/* log.c — one formatted line per call, written with one write(2) so lines
 * from several workers do not interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pd_log_level max_level = PD_LOG_INFO;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void pd_log_set_level(pd_log_level level) { max_level = level; }

int pd_log_parse_level(const char *name) {
    for (int i = 0; i < 4; i++)
        if (name != NULL && strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void pd_log(pd_log_level level, const char *fmt, ...) {
    if (level > max_level)
        return;
    char line[1024];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%SZ", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, " porteirod[%d] %s: ", (int)getpid(),
                  level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    /* A long message is cut, never the newline. */
    n = m < 0 ? n : (n + m < (int)sizeof(line) - 1 ? n + m : (int)sizeof(line) - 2);
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
    (void)ignored;
}
