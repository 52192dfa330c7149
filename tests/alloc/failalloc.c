/* failalloc.c — allocation-failure injection for tests/alloc/: the program
 * is linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 * --wrap=strdup, so every allocation porteiro's own code (the library, the
 * daemon's objects, the test) makes goes through here. Allocations inside
 * shared libraries (libc, hiredis, libevent, libyaml) are not wrapped.
 *
 * failalloc_arm(n): the n-th allocation from now fails (n >= 1), and only
 * that one; failalloc_arm(0): none fails, allocations are counted. The
 * sites (return addresses) of the allocations counted are kept, to report
 * how many distinct allocation sites a run exercised. */
#include "failalloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);

#define MAX_SITES 4096

static atomic_long counter; /* allocations since arming */
static atomic_long fail_at; /* 0: none */
static atomic_int failed;   /* the armed one has failed */
static void *sites[MAX_SITES];
static atomic_int nsites;

void failalloc_arm(long n) {
    atomic_store(&counter, 0);
    atomic_store(&failed, 0);
    atomic_store(&fail_at, n);
}

long failalloc_count(void) {
    return atomic_load(&counter);
}
bool failalloc_failed(void) {
    return atomic_load(&failed) != 0;
}
int failalloc_sites(void) {
    return atomic_load(&nsites);
}

/* Counts one allocation from site; true when it must fail. */
static bool should_fail(void *site) {
    long n = atomic_fetch_add(&counter, 1) + 1;
    int k = atomic_load(&nsites), i;
    for (i = 0; i < k && sites[i] != site; i++)
        ;
    if (i == k && k < MAX_SITES && atomic_compare_exchange_strong(&nsites, &k, k + 1))
        sites[k] = site;
    if (n != atomic_load(&fail_at))
        return false;
    atomic_store(&failed, 1);
    if (getenv("FAILALLOC_VERBOSE") != NULL)
        fprintf(stderr, "failalloc: allocation %ld fails, from %p\n", n, site);
    return true;
}

void *__wrap_malloc(size_t size) {
    return should_fail(__builtin_return_address(0)) ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
    return should_fail(__builtin_return_address(0)) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
    return should_fail(__builtin_return_address(0)) ? NULL : __real_realloc(p, size);
}

char *__wrap_strdup(const char *s) {
    return should_fail(__builtin_return_address(0)) ? NULL : __real_strdup(s);
}
