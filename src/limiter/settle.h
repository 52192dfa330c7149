/* settle.h — a settle's call (issue 38): shared by the blocking calls
 * (settle.c) and the async ones (async.c). */
#ifndef PT_LIMITER_SETTLE_H
#define PT_LIMITER_SETTLE_H

#include "limiter/handle.h"

/* Validates req (the admitted check: its limits, key, now_ms; its cost is
 * not read) and u into a settle's call: delta = used - estimate. Values
 * out of range are PORTEIRO_ERR_INVALID, a sliding_log limit
 * PORTEIRO_ERR_UNSUPPORTED (message in errmsg). A give-back empties the
 * deny cache (units come back). Needs p->mu held. */
porteiro_status pt_settle_prepare(porteiro_t *p, const porteiro_request *req,
                                  const porteiro_usage *u, const char *ns, pt_call *call);

/* The same for a multi-key check's items (porteiro_request.multi): each
 * item's cost is what it used, estimates[i] (NULL: 0) what it was checked
 * with. */
porteiro_status pt_settle_prepare_multi(porteiro_t *p, const porteiro_multi_request *req,
                                        const int64_t *estimates, int64_t age_ms, pt_call *call);

/* porteiro_settle's request, whatever it names (limits, a policy, items):
 * validated, prepared, its on_error (a policy's) and top keys set. Needs
 * p->mu held. */
porteiro_status pt_settle_prepare_request(porteiro_t *p, const porteiro_request *req,
                                          const porteiro_usage *u, pt_call *call);

#endif
