/* spop_client.h — a HAProxy side of SPOP 2.0 by hand, for tests that drive
 * porteirod's SPOE listener with raw frames (tests/daemon/test_daemon_spoe.c,
 * tests/daemon/test_haproxy.c):
 * frames written byte by byte (HELLO, a `check` NOTIFY with a key of any
 * bytes), a blocking loopback connection, the agent's frames split and
 * read back with porteirod's own codec (daemon/spoe/spop.h). Every helper
 * fails the running cmocka test on error. */
#ifndef SPOP_CLIENT_H
#define SPOP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spoe/spop.h"

typedef struct spop_wire {
    uint8_t b[65536];
    size_t n;
} spop_wire;

void spop_put(spop_wire *w, const void *p, size_t n);
void spop_put_varint(spop_wire *w, uint64_t v);
/* A string: its length as a varint, then its n bytes. */
void spop_put_bytes(spop_wire *w, const void *p, size_t n);
void spop_put_str(spop_wire *w, const char *s);
/* Starts a frame (its length fixed by spop_end_frame): returns where. */
size_t spop_begin_frame(spop_wire *w, uint8_t type, uint32_t flags, uint64_t sid, uint64_t fid);
void spop_end_frame(spop_wire *w, size_t at);
/* A HAPROXY-HELLO as HAProxy 2.6 writes it (versions NULL or max_frame 0:
 * left out). */
void spop_hello_frame(spop_wire *w, const char *versions, uint32_t max_frame, bool healthcheck);
/* A NOTIFY with one `check` message: policy, key (key_len bytes, a string)
 * and cost 1; spop_notify_frame with the frame's flags (0: a fragment),
 * spop_check_frame with FIN. */
void spop_notify_frame(spop_wire *w, uint32_t flags, uint64_t sid, uint64_t fid, const char *policy,
                       const void *key, size_t key_len);
void spop_check_frame(spop_wire *w, uint64_t sid, uint64_t fid, const char *policy, const void *key,
                      size_t key_len);

/* A connection to 127.0.0.1:port, reads timing out after 5 s. */
int spop_connect(int port);
void spop_send(int fd, const spop_wire *w);
/* Reads agent frames into in until want of them came, or the connection
 * closed (*closed). Returns how many whole frames in holds. */
int spop_read_frames(int fd, spop_wire *in, int want, bool *closed);
/* Frame i (0-based) of in, parsed; returns its length (the bytes after
 * its 4-byte length). */
size_t spop_frame_at(const spop_wire *in, int i, pd_spop_frame *f);
/* An ACK's SET-VAR named name: its integer (-1: absent), or its string
 * into out ("" when absent). */
int64_t spop_ack_int(const pd_spop_frame *f, const char *name);
void spop_ack_str(const pd_spop_frame *f, const char *name, char *out, size_t cap);
/* Whether an ACK sets the variable name (of any type). */
bool spop_ack_has(const pd_spop_frame *f, const char *name);

#endif
