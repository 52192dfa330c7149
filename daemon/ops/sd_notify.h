/* sd_notify.h — telling the service manager how porteirod is doing: the
 * notification protocol of sd_notify(3), written here (one datagram per
 * message on the AF_UNIX socket named by $NOTIFY_SOCKET), so porteirod does
 * not depend on libsystemd. Without $NOTIFY_SOCKET every call does nothing.
 *
 * And the watchdog: with $WATCHDOG_USEC set (systemd's WatchdogSec=), a
 * timer on the main loop sends WATCHDOG=1 every half interval, but only
 * while every worker's loop has shown itself alive within that interval;
 * a stuck loop stops the pings and the service manager restarts porteirod. */
#ifndef PD_SD_NOTIFY_H
#define PD_SD_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;

/* Reads $NOTIFY_SOCKET ("/path" or "@abstract"), $WATCHDOG_USEC and
 * $WATCHDOG_PID. Call once, before any thread starts. Returns true when
 * notifications will be sent. */
bool pd_notify_init(void);

/* Sends one message: newline-separated "NAME=value" assignments, e.g.
 * "READY=1\nSTATUS=listening". Returns 0, or -1 (not enabled, or the send
 * failed: the service manager went away; porteirod keeps running). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
int pd_notify(const char *fmt, ...);

/* "RELOADING=1" with MONOTONIC_USEC (systemd's reload protocol since 253;
 * older versions ignore the extra field). */
int pd_notify_reloading(void);

/* The watchdog interval in µs (0: no watchdog asked for this process). */
uint64_t pd_notify_watchdog_usec(void);

typedef struct pd_watchdog pd_watchdog;

/* A watchdog over nloops event loops; pings from main_base. NULL when no
 * watchdog is asked for (or out of memory, logged). */
pd_watchdog *pd_watchdog_new(struct event_base *main_base, int nloops);
/* Loop i (0 .. nloops-1) shows it is alive with a timer of its own.
 * Returns 0, or -1. */
int pd_watchdog_attach(pd_watchdog *w, int i, struct event_base *base);
/* porteirod is stopping: loops end one by one, which is no failure; no
 * more pings (systemd watches the stop with its own timeout). Any thread. */
void pd_watchdog_stopping(pd_watchdog *w);
/* Stops and frees; NULL is fine. Call after the loops have stopped. */
void pd_watchdog_free(pd_watchdog *w);

#endif
