/* Hooked calls on small stacks (shim-tests/tests/robust/small_stacks.rs).
 *
 * Built twice from this file: with -DEARLY_LIB as libsmall_stacks_early.so (the hook callers,
 * the stack meter, and a constructor that runs before the shim's: a DT_NEEDED library's
 * constructor runs before a preloaded one's), and without it as the program, linked against
 * that library.
 *
 *   small_stacks measure   every hook, called twice (cold: its first call; warm: its second,
 *                          asking for another mask so that it is logged again), each on a
 *                          fresh 64 KiB pattern-filled stack: reports the bytes each call used
 *   small_stacks early     (EARLY_HOOK=<name>) what the library's constructor measured for
 *                          that hook as the first call of the process, and the main thread's
 *                          mask before and after it
 *   small_stacks threads   threads on PTHREAD_STACK_MIN stacks, with a guard page (glibc's)
 *                          and self-allocated without one (a canary below), each calling one
 *                          hook twice; one report per thread
 *   small_stacks signal    sched_setaffinity from a SIGUSR1 handler on an 8 KiB (SIGSTKSZ)
 *                          alternate stack with a guard page below, twice
 */
#include "report.h"
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <ucontext.h>

#define PATTERN 0xA5
/* The stack a measured call runs on: far more than any call needs, so the meter never
 * faults; the guard page below it turns a runaway into a crash rather than corruption. */
#define METER_STACK (64 * 1024)

struct hook {
    const char *name;
    void (*call)(void);
};

#ifdef EARLY_LIB

static int flip;

/* A different single CPU each call, so that every call is a new decision the shim logs. */
static void next_mask(cpu_set_t *set) {
    CPU_ZERO(set);
    CPU_SET(flip++ % cpu_count(), set);
}

static void *noop(void *arg) { return arg; }

static void call_create(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, noop, NULL) == 0)
        pthread_join(t, NULL);
}
static void call_pthread_set(void) {
    cpu_set_t s;
    next_mask(&s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static void call_sched_set(void) {
    cpu_set_t s;
    next_mask(&s);
    sched_setaffinity(0, sizeof s, &s);
}
static void call_syscall_set(void) {
    cpu_set_t s;
    next_mask(&s);
    syscall(SYS_sched_setaffinity, 0, sizeof s, &s);
}
static void call_attr_set(void) {
    pthread_attr_t a;
    cpu_set_t s;
    next_mask(&s);
    pthread_attr_init(&a);
    pthread_attr_setaffinity_np(&a, sizeof s, &s);
    pthread_attr_destroy(&a);
}
static void call_default_set(void) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_setattr_default_np(&a);
    pthread_attr_destroy(&a);
}
static void call_sched_get(void) {
    cpu_set_t s;
    sched_getaffinity(0, sizeof s, &s);
}
static void call_pthread_get(void) {
    cpu_set_t s;
    pthread_getaffinity_np(pthread_self(), sizeof s, &s);
}
static void call_syscall_get(void) {
    cpu_set_t s;
    syscall(SYS_sched_getaffinity, 0, sizeof s, &s);
}

const struct hook hooks[] = {
    {"pthread_create", call_create},
    {"pthread_setaffinity_np", call_pthread_set},
    {"sched_setaffinity", call_sched_set},
    {"syscall_setaffinity", call_syscall_set},
    {"pthread_attr_setaffinity_np", call_attr_set},
    {"pthread_setattr_default_np", call_default_set},
    {"sched_getaffinity", call_sched_get},
    {"pthread_getaffinity_np", call_pthread_get},
    {"syscall_getaffinity", call_syscall_get},
    {NULL, NULL},
};

const struct hook *hook_named(const char *name) {
    for (const struct hook *h = hooks; h->name; h++)
        if (strcmp(h->name, name) == 0)
            return h;
    return NULL;
}

/* A pattern-filled region of `size` bytes above a PROT_NONE guard page. */
static char *meter_region(size_t size, char **map, size_t *map_len) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *map_len = size + page;
    *map = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (*map == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    mprotect(*map, page, PROT_NONE);
    char *lo = *map + page;
    memset(lo, PATTERN, size);
    return lo;
}

/* Bytes of the region's top that were written: the deepest byte no longer the pattern. */
static long used_bytes(const char *lo, size_t size) {
    size_t i = 0;
    while (i < size && (unsigned char)lo[i] == PATTERN)
        i++;
    return (long)(size - i);
}

static ucontext_t caller_ctx, meter_ctx;
static void (*metered)(void);
static void run_metered(void) { metered(); }

/* The stack bytes `fn` uses, run on a fresh meter stack with makecontext. */
long measure_depth(void (*fn)(void)) {
    char *map;
    size_t map_len;
    char *lo = meter_region(METER_STACK, &map, &map_len);
    getcontext(&meter_ctx);
    meter_ctx.uc_stack.ss_sp = lo;
    meter_ctx.uc_stack.ss_size = METER_STACK;
    meter_ctx.uc_link = &caller_ctx;
    metered = fn;
    makecontext(&meter_ctx, run_metered, 0);
    swapcontext(&caller_ctx, &meter_ctx);
    long used = used_bytes(lo, METER_STACK);
    munmap(map, map_len);
    return used;
}

/* The stack bytes a new thread uses from birth to exit when it does nothing itself: under
 * the shim, its start trampoline, the log record and the exit handler. */
long thread_start_depth(void) {
    char *map;
    size_t map_len;
    char *lo = meter_region(METER_STACK, &map, &map_len);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstack(&a, lo, METER_STACK);
    pthread_t t;
    long used = -1;
    if (pthread_create(&t, &a, noop, NULL) == 0) {
        pthread_join(t, NULL);
        used = used_bytes(lo, METER_STACK);
    }
    pthread_attr_destroy(&a);
    munmap(map, map_len);
    return used;
}

long early_depth = -1;
char early_before[64] = "?", early_after[64] = "?";

/* Runs before the shim's constructor: the hook named by EARLY_HOOK is the process's first. */
__attribute__((constructor)) static void early(void) {
    const char *name = getenv("EARLY_HOOK");
    const struct hook *h = name ? hook_named(name) : NULL;
    if (!h)
        return;
    read_allowed("/proc/self/status", early_before, sizeof early_before);
    early_depth = measure_depth(h->call);
    read_allowed("/proc/self/status", early_after, sizeof early_after);
}

#else /* the program */

extern const struct hook hooks[];
extern long early_depth;
extern char early_before[64], early_after[64];
long measure_depth(void (*fn)(void));
long thread_start_depth(void);

static void append(char *out, size_t len, const char *fmt, long a, long b, const char *name) {
    size_t used = strlen(out);
    snprintf(out + used, len - used, fmt, name, a, name, b);
}

static int measure(void) {
    char extra[900] = "";
    for (const struct hook *h = hooks; h->name; h++) {
        long cold = measure_depth(h->call);
        long warm = measure_depth(h->call);
        append(extra, sizeof extra, "%s_cold=%ld %s_warm=%ld ", cold, warm, h->name);
    }
    size_t used = strlen(extra);
    snprintf(extra + used, sizeof extra - used, "thread_start=%ld", thread_start_depth());
    report_self("main", 0, extra);
    return 0;
}

static int early(void) {
    char extra[200];
    snprintf(extra, sizeof extra, "early=%ld before=%s after=%s", early_depth, early_before,
             early_after);
    report_self("main", 0, extra);
    return early_depth > 0 ? 0 : 1;
}

/* What a small-stack thread found; it reports through main, since report_self's buffers
 * (8 KiB of /proc text) are more than such a stack should carry besides the calls. */
struct result {
    int first, second; /* the two calls' results */
    int cpu;
    long tid;
    char status[4096];
};

enum { CREATE, PTHREAD_SET, SCHED_SET, SYSCALL_SET, KINDS };
static const char *kind_names[KINDS] = {"pthread_create", "pthread_setaffinity_np",
                                        "sched_setaffinity", "syscall_setaffinity"};
struct job {
    int kind;
    struct result *out;
};

static void *child(void *arg) { return arg; }

static int call_kind(int kind, int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_t t;
    switch (kind) {
    case CREATE: {
        int ret = pthread_create(&t, NULL, child, NULL);
        if (ret == 0)
            pthread_join(t, NULL);
        return ret;
    }
    case PTHREAD_SET:
        return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    case SCHED_SET:
        return sched_setaffinity(0, sizeof s, &s) == 0 ? 0 : errno;
    default:
        return syscall(SYS_sched_setaffinity, 0, sizeof s, &s) == 0 ? 0 : errno;
    }
}

static void *small_thread(void *arg) {
    struct job *job = arg;
    struct result *r = job->out;
    r->first = call_kind(job->kind, 0);
    r->second = call_kind(job->kind, cpu_count() - 1);
    r->tid = (long)syscall(SYS_gettid);
    r->cpu = sched_getcpu();
    int fd = open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, r->status, sizeof r->status - 1) : -1;
    r->status[n > 0 ? n : 0] = 0;
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void allowed_of(const char *status, char *out, size_t len) {
    snprintf(out, len, "?");
    const char *at = strstr(status, "Cpus_allowed_list:");
    if (!at)
        return;
    at += strlen("Cpus_allowed_list:");
    while (*at == ' ' || *at == '\t')
        at++;
    size_t i = 0;
    while (at[i] && at[i] != '\n' && i + 1 < len) {
        out[i] = at[i];
        i++;
    }
    out[i] = 0;
}

#define CANARY (64 * 1024)

static int threads(void) {
    static struct result results[2 * KINDS];
    int id = 1;
    for (int own = 0; own < 2; own++) {
        for (int kind = 0; kind < KINDS; kind++, id++) {
            struct result *r = &results[id - 1];
            struct job job = {kind, r};
            pthread_attr_t a;
            pthread_attr_init(&a);
            char *map = NULL;
            size_t map_len = CANARY + PTHREAD_STACK_MIN;
            if (own) {
                /* A stack of the program's own, no guard page: what lies below is a canary. */
                map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
                if (map == MAP_FAILED)
                    return 2;
                memset(map, PATTERN, CANARY);
                pthread_attr_setstack(&a, map + CANARY, PTHREAD_STACK_MIN);
            } else {
                pthread_attr_setstacksize(&a, PTHREAD_STACK_MIN);
            }
            pthread_t t;
            int ret = pthread_create(&t, &a, small_thread, &job);
            pthread_attr_destroy(&a);
            if (ret != 0) {
                fprintf(stderr, "pthread_create: %d\n", ret);
                return 2;
            }
            pthread_join(t, NULL);
            const char *canary = "none";
            if (own) {
                canary = "intact";
                for (size_t i = 0; i < CANARY; i++)
                    if ((unsigned char)map[i] != PATTERN)
                        canary = "smashed";
                munmap(map, map_len);
            }
            char allowed[256];
            allowed_of(r->status, allowed, sizeof allowed);
            emit_line("report role=worker id=%d pid=%d tid=%ld cpu=%d allowed=%s hook=%s "
                      "stack=%s first=%d second=%d canary=%s",
                      id, (int)getpid(), r->tid, r->cpu, allowed, kind_names[kind],
                      own ? "own" : "min", r->first, r->second, canary);
        }
    }
    report_self("main", 0, "");
    return 0;
}

static volatile sig_atomic_t handled;
static int sig_ret[2];
static char *alt_lo;
static size_t alt_size;

static void on_signal(int sig) {
    (void)sig;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(handled % cpu_count(), &s);
    sig_ret[handled] = sched_setaffinity(0, sizeof s, &s) == 0 ? 0 : errno;
    handled++;
}

static int signal_mode(void) {
    /* The classic SIGSTKSZ (glibc now suggests more where the signal frame is large: with
     * AVX-512 it is about 3.5 KiB of the 8). */
    alt_size = 8192;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t map_len = page + alt_size;
    char *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 2;
    mprotect(map, page, PROT_NONE);
    alt_lo = map + page;
    stack_t ss = {.ss_sp = alt_lo, .ss_size = alt_size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    long depth[2];
    for (int i = 0; i < 2; i++) {
        memset(alt_lo, PATTERN, alt_size);
        raise(SIGUSR1);
        size_t j = 0;
        while (j < alt_size && (unsigned char)alt_lo[j] == PATTERN)
            j++;
        depth[i] = (long)(alt_size - j);
    }
    char extra[200];
    snprintf(extra, sizeof extra, "handled=%d cold_ret=%d warm_ret=%d cold_depth=%ld "
             "warm_depth=%ld altstack=%zu",
             (int)handled, sig_ret[0], sig_ret[1], depth[0], depth[1], alt_size);
    report_self("main", 0, extra);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "measure") == 0)
        return measure();
    if (strcmp(mode, "early") == 0)
        return early();
    if (strcmp(mode, "threads") == 0)
        return threads();
    if (strcmp(mode, "signal") == 0)
        return signal_mode();
    fprintf(stderr, "usage: small_stacks measure|early|threads|signal\n");
    return 2;
}

#endif
