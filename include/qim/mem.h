/*
 * mem.h — the allocator wrapper. Policy: small, internally sized allocations abort on
 * failure (qim_malloc & co. never return NULL); sizes a peer controls (frames, pages,
 * message bodies) go through qim_trymalloc, which returns NULL, after the caller has
 * applied its limit. Every byte is counted, so tests and benchmarks can read the live
 * total and fault injection can fail the N-th try-allocation.
 */
#ifndef QIM_MEM_H
#define QIM_MEM_H

#include <stddef.h>

void *qim_malloc(size_t n);
void *qim_calloc(size_t count, size_t n);
void *qim_realloc(void *p, size_t n);
char *qim_strdup(const char *s);              /* NULL gives NULL */
char *qim_strndup(const char *s, size_t n);   /* at most n chars, always terminated */
void *qim_memdup(const void *p, size_t n);
void qim_free(void *p); /* accepts NULL */

void *qim_trymalloc(size_t n); /* NULL on failure or injected fault */
/* NULL on failure or injected fault; then `p` is untouched and still owned by the caller. */
void *qim_tryrealloc(void *p, size_t n);

/* Live bytes allocated through this wrapper, as malloc_usable_size() counts them (at
 * least the requested sizes). Memory from these functions must be released with qim_free
 * (or qim_realloc), never free(), or the count drifts. */
size_t qim_mem_used(void);
/* Test hook: the n-th following qim_trymalloc/qim_tryrealloc fails, once (1 = the very
 * next one); 0 disarms. Process-wide. */
void qim_mem_fail_after(unsigned n);

#endif
