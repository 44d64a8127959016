/* A preload that counts the program's calls to the heap: malloc, calloc, realloc,
 * posix_memalign, aligned_alloc and memalign, each handed to glibc's own. At exit it writes
 * "allocs N" to stderr. Loaded first, it sees every call any later library makes too. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_ulong calls;

void *malloc(size_t n) { atomic_fetch_add(&calls, 1); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { atomic_fetch_add(&calls, 1); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { atomic_fetch_add(&calls, 1); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { atomic_fetch_add(&calls, 1); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { atomic_fetch_add(&calls, 1); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    atomic_fetch_add(&calls, 1);
    *out = __libc_memalign(a, n);
    return *out ? 0 : 12;
}

__attribute__((destructor)) static void report(void) {
    char line[64];
    int len = snprintf(line, sizeof line, "allocs %lu\n", (unsigned long)atomic_load(&calls));
    if (len > 0) write(2, line, (size_t)len);
}
