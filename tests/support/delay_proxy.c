/* delay_proxy.c — see delay_proxy.h. Every socket and queue belongs to the
 * proxy's thread; only the delay, the counters and the stop flag are
 * shared, under the mutex. */
#include "delay_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DP_MAX_PAIRS 64
#define DP_READ 16384 /* bytes read at once: one chunk at most */

/* Bytes read at one time, to be written once due (ms, monotonic). */
typedef struct dp_chunk {
    struct dp_chunk *next;
    int64_t due_ms;
    size_t len, off; /* off: bytes already written */
    char data[];
} dp_chunk;

/* One direction: read from `from`, queued, written to `to`. */
typedef struct dp_lane {
    int from, to;
    dp_chunk *head, *tail;
    bool eof;     /* `from` closed or failed: nothing more will be read */
    bool blocked; /* the last write would have blocked: wait for POLLOUT */
} dp_lane;

/* A client and its connection to the target; lane 0 is client → target. */
typedef struct dp_pair {
    int fd[2];
    dp_lane lane[2];
} dp_pair;

struct delay_proxy {
    int listen_fd, port, target_port;
    int wake[2]; /* a pipe: a byte wakes the thread (stop) */
    pthread_t thread;
    pthread_mutex_t mu; /* guards the four fields below */
    int delay_ms, jitter_ms, accepted;
    bool stop;
    unsigned seed; /* jitter's rand_r state (thread only) */
    dp_pair *pairs[DP_MAX_PAIRS];
};

static int64_t dp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dp_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void dp_pair_free(dp_pair *pr) {
    for (int i = 0; i < 2; i++) {
        close(pr->fd[i]);
        dp_chunk *c = pr->lane[i].head;
        while (c != NULL) {
            dp_chunk *next = c->next;
            free(c);
            c = next;
        }
    }
    free(pr);
}

/* A new client: connect it to the target (loopback: a blocking connect is
 * immediate) and make its pair, or close it. */
static void dp_accept(delay_proxy *dp) {
    int cfd = accept(dp->listen_fd, NULL, NULL);
    if (cfd < 0)
        return;
    int slot = 0;
    while (slot < DP_MAX_PAIRS && dp->pairs[slot] != NULL)
        slot++;
    int tfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dp->target_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    dp_pair *pr = slot < DP_MAX_PAIRS ? calloc(1, sizeof(*pr)) : NULL;
    if (pr == NULL || tfd < 0 || connect(tfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        dp_nonblock(cfd) != 0 || dp_nonblock(tfd) != 0) {
        free(pr);
        close(cfd);
        if (tfd >= 0)
            close(tfd);
        return;
    }
    pr->fd[0] = cfd;
    pr->fd[1] = tfd;
    pr->lane[0].from = pr->lane[1].to = cfd;
    pr->lane[0].to = pr->lane[1].from = tfd;
    dp->pairs[slot] = pr;
    pthread_mutex_lock(&dp->mu);
    dp->accepted++;
    pthread_mutex_unlock(&dp->mu);
}

/* Reads what `from` has into a chunk due after the delay (never before the
 * chunk ahead of it). EOF or an error ends the lane. */
static void dp_read(delay_proxy *dp, dp_lane *l) {
    dp_chunk *c = malloc(sizeof(*c) + DP_READ);
    ssize_t n = c != NULL ? recv(l->from, c->data, DP_READ, 0) : -1;
    if (n <= 0) {
        free(c);
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            l->eof = true;
        return;
    }
    pthread_mutex_lock(&dp->mu);
    int64_t hold = dp->delay_ms;
    if (dp->jitter_ms > 0)
        hold += rand_r(&dp->seed) % (dp->jitter_ms + 1);
    pthread_mutex_unlock(&dp->mu);
    c->next = NULL;
    c->len = (size_t)n;
    c->off = 0;
    c->due_ms = dp_now_ms() + hold;
    if (l->tail != NULL && c->due_ms < l->tail->due_ms)
        c->due_ms = l->tail->due_ms;
    if (l->tail != NULL)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Writes the chunks that are due. -1 when `to` failed (the pair ends). */
static int dp_flush(dp_lane *l, int64_t now) {
    l->blocked = false;
    while (l->head != NULL && l->head->due_ms <= now) {
        dp_chunk *c = l->head;
        ssize_t n = send(l->to, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                l->blocked = true;
                return 0;
            }
            return -1;
        }
        c->off += (size_t)n;
        if (c->off < c->len)
            continue;
        l->head = c->next;
        if (l->head == NULL)
            l->tail = NULL;
        free(c);
    }
    return 0;
}

/* Flushes every lane, ends the pairs that are done or failed, and returns
 * the poll timeout: until the next chunk is due, -1 when none waits. */
static int dp_flush_all(delay_proxy *dp) {
    int64_t now = dp_now_ms(), next = -1;
    for (int i = 0; i < DP_MAX_PAIRS; i++) {
        dp_pair *pr = dp->pairs[i];
        if (pr == NULL)
            continue;
        bool end = false;
        for (int k = 0; k < 2; k++) {
            dp_lane *l = &pr->lane[k];
            end |= dp_flush(l, now) != 0 || (l->eof && l->head == NULL);
            if (l->head != NULL && !l->blocked && (next < 0 || l->head->due_ms < next))
                next = l->head->due_ms;
        }
        if (end) {
            dp_pair_free(pr);
            dp->pairs[i] = NULL;
        }
    }
    return next < 0 ? -1 : (int)(next > now ? next - now : 0);
}

static void *dp_run(void *arg) {
    delay_proxy *dp = arg;
    struct pollfd pfd[2 + 2 * DP_MAX_PAIRS];
    for (;;) {
        int timeout = dp_flush_all(dp);
        pfd[0] = (struct pollfd){.fd = dp->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = dp->listen_fd, .events = POLLIN};
        for (int i = 0; i < DP_MAX_PAIRS; i++)
            for (int k = 0; k < 2; k++) {
                dp_pair *pr = dp->pairs[i];
                struct pollfd *p = &pfd[2 + 2 * i + k];
                *p = (struct pollfd){.fd = -1};
                if (pr == NULL)
                    continue;
                /* fd[k] is read by lane k and written by lane 1 - k. */
                p->events = (short)((pr->lane[k].eof ? 0 : POLLIN) |
                                    (pr->lane[1 - k].blocked ? POLLOUT : 0));
                p->fd = p->events != 0 ? pr->fd[k] : -1;
            }
        if (poll(pfd, 2 + 2 * DP_MAX_PAIRS, timeout) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&dp->mu);
        bool stop = dp->stop;
        pthread_mutex_unlock(&dp->mu);
        if (stop)
            break;
        if (pfd[1].revents & POLLIN)
            dp_accept(dp);
        for (int i = 0; i < DP_MAX_PAIRS; i++)
            for (int k = 0; k < 2; k++) {
                dp_pair *pr = dp->pairs[i];
                short ev = pfd[2 + 2 * i + k].revents;
                if (pr != NULL && !pr->lane[k].eof && (ev & (POLLIN | POLLHUP | POLLERR)))
                    dp_read(dp, &pr->lane[k]);
            }
    }
    return NULL;
}

delay_proxy *delay_proxy_start(int target_port, int delay_ms, int jitter_ms) {
    delay_proxy *dp = calloc(1, sizeof(*dp));
    if (dp == NULL)
        return NULL;
    dp->target_port = target_port;
    dp->delay_ms = delay_ms;
    dp->jitter_ms = jitter_ms;
    dp->seed = (unsigned)target_port;
    dp->wake[0] = dp->wake[1] = -1;
    pthread_mutex_init(&dp->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    dp->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (dp->listen_fd < 0 || bind(dp->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(dp->listen_fd, 64) != 0 ||
        getsockname(dp->listen_fd, (struct sockaddr *)&a, &alen) != 0 || pipe(dp->wake) != 0) {
        fprintf(stderr, "delay_proxy: cannot listen: %s\n", strerror(errno));
        goto fail;
    }
    dp->port = ntohs(a.sin_port);
    if (pthread_create(&dp->thread, NULL, dp_run, dp) != 0) {
        fprintf(stderr, "delay_proxy: cannot start its thread\n");
        goto fail;
    }
    return dp;
fail:
    if (dp->listen_fd >= 0)
        close(dp->listen_fd);
    for (int i = 0; i < 2; i++)
        if (dp->wake[i] >= 0)
            close(dp->wake[i]);
    pthread_mutex_destroy(&dp->mu);
    free(dp);
    return NULL;
}

int delay_proxy_port(const delay_proxy *dp) {
    return dp->port;
}

void delay_proxy_set(delay_proxy *dp, int delay_ms, int jitter_ms) {
    pthread_mutex_lock(&dp->mu);
    dp->delay_ms = delay_ms;
    dp->jitter_ms = jitter_ms;
    pthread_mutex_unlock(&dp->mu);
}

int delay_proxy_accepted(delay_proxy *dp) {
    pthread_mutex_lock(&dp->mu);
    int n = dp->accepted;
    pthread_mutex_unlock(&dp->mu);
    return n;
}

void delay_proxy_stop(delay_proxy *dp) {
    if (dp == NULL)
        return;
    pthread_mutex_lock(&dp->mu);
    dp->stop = true;
    pthread_mutex_unlock(&dp->mu);
    char b = 1;
    if (write(dp->wake[1], &b, 1) != 1)
        fprintf(stderr, "delay_proxy: cannot wake its thread\n");
    pthread_join(dp->thread, NULL);
    for (int i = 0; i < DP_MAX_PAIRS; i++)
        if (dp->pairs[i] != NULL)
            dp_pair_free(dp->pairs[i]);
    close(dp->listen_fd);
    close(dp->wake[0]);
    close(dp->wake[1]);
    pthread_mutex_destroy(&dp->mu);
    free(dp);
}
