/* log.h — leveled log lines on stderr, one line per call:
 *   text (default): "2026-12-03T08:00:00Z porteirod[42] warn: ..."
 *   json:           {"time":"2026-12-03T08:00:00Z","level":"warn","pid":42,"msg":"..."}
 * When stderr is the systemd journal ($JOURNAL_STREAM names its device and
 * inode), each line starts with its syslog priority ("<4>") so that
 * `journalctl -p` filters by level, and text lines leave the time and pid
 * to the journal. */
#ifndef PD_LOG_H
#define PD_LOG_H

#include <stdbool.h>

typedef enum pd_log_level {
    PD_LOG_ERROR = 0,
    PD_LOG_WARN = 1,
    PD_LOG_INFO = 2,
    PD_LOG_DEBUG = 3
} pd_log_level;

typedef enum pd_log_format { PD_LOG_TEXT = 0, PD_LOG_JSON = 1 } pd_log_format;

/* Lines above this level are dropped (default: info). */
void pd_log_set_level(pd_log_level level);
/* "error", "warn", "info", "debug"; returns -1 for anything else. */
int pd_log_parse_level(const char *name);
void pd_log_set_format(pd_log_format format);
/* "text" or "json"; returns -1 for anything else. */
int pd_log_parse_format(const char *name);
/* Looks at $JOURNAL_STREAM and stderr again; returns true when stderr is
 * the journal. main calls it once at start; tests after moving stderr. */
bool pd_log_init(void);

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void pd_log(pd_log_level level, const char *fmt, ...);

#endif
