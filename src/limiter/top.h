/* top.h — a handle's top keys (core/topkeys.h per name): fed from the one
 * decision path (pt_path_answer), read by porteiro_top_get. docs/top.md */
#ifndef PT_LIMITER_TOP_H
#define PT_LIMITER_TOP_H

#include "core/call.h"
#include "porteiro.h"

typedef struct pt_topset pt_topset;

/* k counters per name; NULL on no memory. */
pt_topset *pt_topset_new(size_t k);
void pt_topset_free(pt_topset *ts);

/* Marks limit (item) i of a prepared call as counted under name, under
 * its client key as its Redis key holds it (the key, or its digest: where
 * pt_call_prepare* said, top_off and top_len). ts NULL or name NULL:
 * nothing. */
void pt_top_tag(pt_topset *ts, pt_call *call, size_t i, const char *name);
/* pt_top_tag for every item of a multi check that names a top_name. */
void pt_top_tag_multi(pt_topset *ts, pt_call *call, const porteiro_multi_request *req);

/* Counts a decision of call (d before shadow mode lets a denial through). */
void pt_top_feed(pt_topset *ts, const pt_call *call, const porteiro_decision *d);

#endif
