/* loop.c — loop.h over the caller's porteiro_loop_ops: each io and timer
 * remembers its loop, so that the code above never passes it around. */
#include "redis/loop.h"

#include <stdlib.h>
#include <time.h>

struct pt_io {
    const pt_loop *loop;
    void *h; /* the loop's handle */
    bool writing;
};

struct pt_timer {
    const pt_loop *loop;
    void *h;
};

int64_t pt_loop_now_us(const pt_loop *loop) {
    if (loop->ops->now_us != NULL)
        return loop->ops->now_us(loop->ctx);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

pt_io *pt_io_new(const pt_loop *loop, int fd, pt_io_fn *fn, void *arg) {
    pt_io *io = malloc(sizeof(*io));
    if (io == NULL)
        return NULL;
    *io = (pt_io){loop, loop->ops->io_new(loop->ctx, fd, fn, arg), false};
    if (io->h == NULL) {
        free(io);
        return NULL;
    }
    return io;
}

/* The connection asks for what it wants after every write: only changes
 * reach the loop. */
void pt_io_want_write(pt_io *io, bool on) {
    if (on == io->writing)
        return;
    io->writing = on;
    io->loop->ops->io_want_write(io->loop->ctx, io->h, on);
}

void pt_io_free(pt_io *io) {
    if (io == NULL)
        return;
    io->loop->ops->io_free(io->loop->ctx, io->h);
    free(io);
}

pt_timer *pt_timer_new(const pt_loop *loop, pt_timer_fn *fn, void *arg) {
    pt_timer *t = malloc(sizeof(*t));
    if (t == NULL)
        return NULL;
    *t = (pt_timer){loop, loop->ops->timer_new(loop->ctx, fn, arg)};
    if (t->h == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

void pt_timer_start(pt_timer *t, int64_t ms) {
    pt_timer_start_us(t, ms * 1000);
}

void pt_timer_start_us(pt_timer *t, int64_t us) {
    t->loop->ops->timer_start(t->loop->ctx, t->h, us < 0 ? 0 : us);
}

void pt_timer_stop(pt_timer *t) {
    if (t != NULL) /* a timer whose creation failed */
        t->loop->ops->timer_stop(t->loop->ctx, t->h);
}

void pt_timer_fire_soon(pt_timer *t) {
    t->loop->ops->timer_fire_soon(t->loop->ctx, t->h);
}

void pt_timer_free(pt_timer *t) {
    if (t == NULL)
        return;
    t->loop->ops->timer_free(t->loop->ctx, t->h);
    free(t);
}
