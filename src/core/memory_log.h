/* memory_log.h — the memory backend's sliding-log state: weighted entries
 * (time, units) kept sorted by time, oldest first.
 *
 * One entry per distinct write time (checks in the same ms merge), each
 * with at least one unit, and entries older than the window are dropped
 * before every write: a log never holds more than L live entries
 * (L <= PORTEIRO_MAX_LOG_LIMIT). */
#ifndef PT_MEMORY_LOG_H
#define PT_MEMORY_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct pt_log_item {
    int64_t t_ms;  /* when the units were written, ms since the epoch */
    int64_t units; /* >= 1 */
} pt_log_item;

/* One allocation: free() releases it. */
typedef struct pt_log {
    size_t head; /* index of the oldest live item */
    size_t len;  /* live items from head */
    size_t cap;  /* allocated items */
    pt_log_item items[];
} pt_log;

/* Adds units at t (in time order; merged into an entry at the same t).
 * log may be NULL (a new log). Returns the log, possibly moved, or NULL when
 * memory ran out (the old log is then unchanged and still owned). */
pt_log *pt_log_add(pt_log *log, int64_t t_ms, int64_t units);

/* Drops the entries written at or before cutoff_ms (they left the window). */
void pt_log_drop_through(pt_log *log, int64_t cutoff_ms);

/* Removes up to units from the newest entries (a refund). */
void pt_log_take_newest(pt_log *log, int64_t units);

/* The live entries, oldest first. */
static inline const pt_log_item *pt_log_items(const pt_log *log) {
    return log != NULL ? log->items + log->head : NULL;
}
static inline size_t pt_log_len(const pt_log *log) {
    return log != NULL ? log->len : 0;
}

#endif
