/* memory_log.c — a sorted array of (time, units) with a moving head. */
#include "core/memory_log.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 4

/* Makes room for one more item at the end: slide to the front when the
 * head has moved, else grow. */
static pt_log *reserve(pt_log *log) {
    if (log == NULL) {
        log = malloc(sizeof(*log) + MIN_CAP * sizeof(log->items[0]));
        if (log != NULL)
            *log = (pt_log){.head = 0, .len = 0, .cap = MIN_CAP};
        return log;
    }
    if (log->head + log->len < log->cap)
        return log;
    if (log->head > 0) {
        memmove(log->items, log->items + log->head, log->len * sizeof(log->items[0]));
        log->head = 0;
        return log;
    }
    size_t cap = log->cap * 2;
    pt_log *grown = realloc(log, sizeof(*log) + cap * sizeof(log->items[0]));
    if (grown == NULL)
        return NULL;
    grown->cap = cap;
    return grown;
}

pt_log *pt_log_add(pt_log *log, int64_t t_ms, int64_t units) {
    pt_log_item *live = log != NULL ? log->items + log->head : NULL;
    size_t n = log != NULL ? log->len : 0;

    /* Usually the newest entry: the same ms merges, a later ms appends. */
    if (n > 0 && live[n - 1].t_ms == t_ms) {
        live[n - 1].units += units;
        return log;
    }
    size_t at = n;
    while (at > 0 && live[at - 1].t_ms > t_ms) /* a clock that went back */
        at--;
    if (at > 0 && live[at - 1].t_ms == t_ms) {
        live[at - 1].units += units;
        return log;
    }
    pt_log *grown = reserve(log);
    if (grown == NULL)
        return NULL;
    live = grown->items + grown->head;
    memmove(live + at + 1, live + at, (grown->len - at) * sizeof(live[0]));
    live[at] = (pt_log_item){t_ms, units};
    grown->len++;
    return grown;
}

void pt_log_drop_through(pt_log *log, int64_t cutoff_ms) {
    if (log == NULL)
        return;
    while (log->len > 0 && log->items[log->head].t_ms <= cutoff_ms) {
        log->head++;
        log->len--;
    }
    if (log->len == 0)
        log->head = 0;
}

void pt_log_take_newest(pt_log *log, int64_t units) {
    while (log != NULL && log->len > 0 && units > 0) {
        pt_log_item *last = &log->items[log->head + log->len - 1];
        int64_t take = last->units < units ? last->units : units;
        last->units -= take;
        units -= take;
        if (last->units == 0)
            log->len--;
    }
}
