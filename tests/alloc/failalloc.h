/* failalloc.h — the N-th allocation fails (failalloc.c). */
#ifndef PT_FAILALLOC_H
#define PT_FAILALLOC_H

#include <stdbool.h>

void failalloc_arm(long n);  /* 0: count only */
long failalloc_count(void);  /* allocations since arming */
bool failalloc_failed(void); /* the armed allocation was reached (and failed) */
int failalloc_sites(void);   /* distinct allocation sites seen so far */

#endif
