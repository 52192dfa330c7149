/* loop.h — the little the async Redis path needs from an event loop: a
 * socket's readiness, one-shot timers and the loop's clock, reached
 * through the caller's porteiro_loop_ops (include/porteiro.h). libevent's
 * table is include/porteiro_libevent.h; another loop is one more small file. */
#ifndef PT_LOOP_H
#define PT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "porteiro.h"

/* The caller's loop: its table and the pointer handed back to it. One per
 * handle (porteiro_t); the connections keep a pointer to it. */
typedef struct pt_loop {
    const porteiro_loop_ops *ops;
    void *ctx;
} pt_loop;

typedef struct pt_timer pt_timer;
typedef void pt_timer_fn(void *arg);

/* The loop's clock (µs, CLOCK_MONOTONIC's). */
int64_t pt_loop_now_us(const pt_loop *loop);

/* A socket watched on the loop: fn(arg, readable, writable) on the loop
 * thread. Reading is always watched, writing only while wanted. NULL on
 * ENOMEM. The fd stays the caller's. */
typedef struct pt_io pt_io;
typedef void pt_io_fn(void *arg, bool readable, bool writable);
pt_io *pt_io_new(const pt_loop *loop, int fd, pt_io_fn *fn, void *arg);
void pt_io_want_write(pt_io *io, bool on);
/* Stops watching and frees; NULL is accepted. */
void pt_io_free(pt_io *io);

/* A one-shot timer calling fn(arg) on the loop thread. NULL on ENOMEM. */
pt_timer *pt_timer_new(const pt_loop *loop, pt_timer_fn *fn, void *arg);
/* (Re)arms the timer to fire after ms milliseconds (_us: microseconds). */
void pt_timer_start(pt_timer *t, int64_t ms);
void pt_timer_start_us(pt_timer *t, int64_t us);
void pt_timer_stop(pt_timer *t);
/* Makes the timer fire at the end of the loop's current pass, with no wait
 * (after the callbacks already due in it): work queued by those callbacks
 * can then go out together. */
void pt_timer_fire_soon(pt_timer *t);
/* Stops and frees; NULL is accepted. */
void pt_timer_free(pt_timer *t);

#endif
