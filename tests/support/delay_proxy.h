/* delay_proxy.h — a TCP proxy on loopback that holds every chunk of bytes
 * D ms (plus 0..J ms of jitter) in each direction: network latency for
 * tests, with no root and no tc netem (test support only).
 *
 * One thread with poll(). Each accepted client gets its own connection to
 * the target; bytes read from either side wait in a timestamped queue of
 * that direction until they are due, then are written to the other side.
 * Jitter never reorders bytes (a chunk is never due before the one ahead
 * of it), as on a TCP connection. A side that closes is closed on the
 * other side once the bytes it sent before have been delivered. */
#ifndef TEST_DELAY_PROXY_H
#define TEST_DELAY_PROXY_H

typedef struct delay_proxy delay_proxy;

/* Listens on a free 127.0.0.1 port and forwards each connection to
 * 127.0.0.1:target_port, delay_ms (>= 0) each way plus up to jitter_ms
 * (>= 0). NULL (with a message on stderr) on failure. */
delay_proxy *delay_proxy_start(int target_port, int delay_ms, int jitter_ms);

/* The port clients connect to. */
int delay_proxy_port(const delay_proxy *dp);

/* Changes the delay of the bytes read from now on, while running. Bytes
 * already queued keep their time. */
void delay_proxy_set(delay_proxy *dp, int delay_ms, int jitter_ms);

/* Connections accepted since the start. */
int delay_proxy_accepted(delay_proxy *dp);

/* Stops the thread, closes every connection, frees everything. NULL: no-op. */
void delay_proxy_stop(delay_proxy *dp);

#endif
