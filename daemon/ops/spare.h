/* spare.h — finished request jobs kept for the next requests of the same
 * worker, so that a request costs no allocation and no zeroing of a large
 * struct: a free list of same-size blocks. One per worker and kind of job,
 * used on the worker's loop only (no lock). */
#ifndef PD_SPARE_H
#define PD_SPARE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pd_spare {
    void *head;                   /* the blocks kept; each block's first pointer links the next */
    size_t n;                     /* blocks kept */
    size_t max;                   /* blocks kept at most: beyond, pd_spare_keep refuses */
    void (*release)(void *block); /* frees a block for good */
} pd_spare;

/* A kept block (its contents as they were left, but for its first pointer),
 * or NULL when none is kept. */
void *pd_spare_take(pd_spare *s);
/* Keeps block (at least a pointer's size) for a later take; false when max
 * are kept already (then the caller frees it). */
bool pd_spare_keep(pd_spare *s, void *block);
/* Frees every kept block with s->release (which sees it as it was kept). */
void pd_spare_free(pd_spare *s);

#endif
