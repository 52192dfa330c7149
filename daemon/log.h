/* log.h — leveled log lines on stderr: "2026-12-03T08:00:00Z porteirod[42] warn: ...". */
#ifndef PD_LOG_H
#define PD_LOG_H

typedef enum pd_log_level {
    PD_LOG_ERROR = 0,
    PD_LOG_WARN = 1,
    PD_LOG_INFO = 2,
    PD_LOG_DEBUG = 3
} pd_log_level;

/* Lines above this level are dropped (default: info). */
void pd_log_set_level(pd_log_level level);
/* "error", "warn", "info", "debug"; returns -1 for anything else. */
int pd_log_parse_level(const char *name);

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void pd_log(pd_log_level level, const char *fmt, ...);

#endif
