/* ngx_porteiro_loop.h — porteiro_loop_ops on nginx's own event loop
 * (docs/event_loop.md): the worker's epoll through ngx_connection_t, its
 * timer tree, and its posted events. */
#ifndef NGX_PORTEIRO_LOOP_H
#define NGX_PORTEIRO_LOOP_H

#include "porteiro.h"

/* ctx: an ngx_log_t * (where the loop's own failures are logged). */
extern const porteiro_loop_ops ngx_porteiro_loop_ops;

#endif
