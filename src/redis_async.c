/* redis_async.c — the event-loop face of the library (porteiro_check_async).
 * The memory backend completes inline; the Redis event-loop connection comes
 * with the daemon (issue 5). */
#include <stdlib.h>

#include "handle.h"

porteiro_status porteiro_attach_libevent(porteiro_t *p, struct event_base *base) {
    if (p == NULL || base == NULL)
        return PORTEIRO_ERR_INVALID;
    return p->redis == NULL ? PORTEIRO_OK : PORTEIRO_ERR_UNSUPPORTED;
}

porteiro_status porteiro_check_async(porteiro_t *p, const porteiro_request *req,
                                     porteiro_callback *cb, void *privdata) {
    porteiro_decision d;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis != NULL)
        return PORTEIRO_ERR_UNSUPPORTED;
    porteiro_status st = porteiro_check_request(p, req, &d);
    if (st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY)
        return st; /* a bad request: the callback is never called */
    cb(p, st, st == PORTEIRO_OK ? &d : NULL, privdata);
    return PORTEIRO_OK;
}

void pt_async_free(porteiro_t *p) { (void)p; }
