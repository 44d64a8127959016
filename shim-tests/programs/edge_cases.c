/* edge_cases: calls at the edges of what the shim must get right. argv[1] picks one:
 *
 *   efault     the main thread passes a bad mask pointer to sched_setaffinity, libc's
 *              syscall(SYS_sched_setaffinity) and pthread_setaffinity_np, and a 128-byte mask
 *              whose tail past the kernel's mask size is unmapped to sched_setaffinity; it reports
 *              sched= syscall= pthread= partial= (0, or the errno / error number).
 *   main_exit  the main thread starts worker 1, reports and calls pthread_exit; worker 1 waits
 *              until the main thread is gone (zombie=1), then starts worker 2 and reports.
 *   vfork      vfork children call sched_setaffinity(0) and syscall(SYS_sched_setaffinity, 0)
 *              for the CPU after the parent's, check their own mask and _exit; the main thread
 *              reports vfork_sched= vfork_syscall= (the children's exit codes: 0 when the
 *              child's mask is what it asked for), then asks for that CPU itself (rc=).
 *   seccomp    installs a seccomp filter that kills the process on process_vm_readv (through
 *              syscall(SYS_seccomp), as libseccomp does), then asks for the CPU after its own
 *              with sched_setaffinity and reports rc=; seccomp_exec installs the same filter
 *              and execs itself as "seccomp_after", which only asks and reports (a filter that
 *              was in force before the shim started, as systemd's SystemCallFilter=).
 *   no_setaffinity  installs a seccomp filter under which sched_setaffinity fails with EPERM
 *              (a sandbox), then starts two workers one after the other, each reporting; the
 *              main thread reports failed= (0, or the first error pthread_create returned).
 *   cancel     worker 1 calls pthread_exit with 42 and worker 2 is cancelled in sleep, each with
 *              a cleanup handler pushed: both unwind through the shim's start routine. The main
 *              thread reports exit= (worker 1's value), cancelled= (1 when worker 2's value is
 *              PTHREAD_CANCELED) and cleaned= (the handlers that ran: 2). */
#include "report.h"
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

#define BAD_MASK ((cpu_set_t *)0x10)

static int errno_of(int rc) {
    return rc == 0 ? 0 : errno;
}

/* A mask of 128 bytes of which only the first `readable` are the last of a readable page, the
 * rest unmapped; it asks for `cpu`. The kernel reads only its own mask size of a longer mask. */
static int partial_mask(int cpu, size_t readable) {
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED || munmap(map + page, page) != 0 || readable < 8 || cpu >= 64)
        return -1;
    unsigned char *mask = (unsigned char *)map + page - readable;
    memset(mask, 0, readable);
    mask[cpu / 8] = (unsigned char)(1u << (cpu % 8));
    int rc = errno_of(sched_setaffinity(0, 128, (cpu_set_t *)mask));
    munmap(map, page);
    return rc;
}

/* The kernel's mask size in bytes: what the raw sched_getaffinity copies out. */
static size_t kernel_mask_size(void) {
    cpu_set_t set;
    long n = syscall(SYS_sched_getaffinity, 0, sizeof set, &set);
    return n > 0 ? (size_t)n : sizeof set;
}

static int efault(void) {
    busy_work();
    int sched = errno_of(sched_setaffinity(0, 128, BAD_MASK));
    int sys = errno_of((int)syscall(SYS_sched_setaffinity, 0, 128, BAD_MASK));
    int pthread = pthread_setaffinity_np(pthread_self(), 128, BAD_MASK);
    int partial = partial_mask((sched_getcpu() + 1) % cpu_count(), kernel_mask_size());
    char extra[128];
    snprintf(extra, sizeof extra, "sched=%d syscall=%d pthread=%d partial=%d", sched, sys,
             pthread, partial);
    report_self("main", 0, extra);
    return 0;
}

static pid_t main_pid;

/* Whether the main thread has ended (its task is a zombie), within a few seconds. */
static int main_gone(void) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)main_pid);
    for (int i = 0; i < 5000; i++) {
        char text[512];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 1;
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        text[n > 0 ? n : 0] = 0;
        char *end = strrchr(text, ')');
        if (end && (end[2] == 'Z' || end[2] == 'X'))
            return 1;
        usleep(1000);
    }
    return 0;
}

static void *second(void *arg) {
    (void)arg;
    report_self("worker", 2, "");
    return NULL;
}

static void *first(void *arg) {
    (void)arg;
    char extra[32];
    snprintf(extra, sizeof extra, "zombie=%d", main_gone());
    pthread_t t;
    int err = pthread_create(&t, NULL, second, NULL);
    if (err != 0) {
        fprintf(stderr, "edge_cases: pthread_create: %s\n", strerror(err));
        exit(101);
    }
    pthread_join(t, NULL);
    report_self("worker", 1, extra);
    return NULL;
}

static int main_exit(void) {
    main_pid = getpid();
    pthread_t t;
    int err = pthread_create(&t, NULL, first, NULL);
    if (err != 0) {
        fprintf(stderr, "edge_cases: pthread_create: %s\n", strerror(err));
        return 101;
    }
    report_self("main", 0, "");
    pthread_exit(NULL);
}

static int cleaned;

static void count_cleanup(void *arg) {
    (void)arg;
    __atomic_fetch_add(&cleaned, 1, __ATOMIC_SEQ_CST);
}

static void *exits(void *arg) {
    pthread_cleanup_push(count_cleanup, arg);
    pthread_exit((void *)42);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *sleeps(void *arg) {
    pthread_cleanup_push(count_cleanup, arg);
    for (;;)
        sleep(1);
    pthread_cleanup_pop(0);
    return NULL;
}

static int cancel(void) {
    pthread_t a, b;
    void *exited = NULL, *cancelled = NULL;
    if (pthread_create(&a, NULL, exits, NULL) != 0 || pthread_join(a, &exited) != 0)
        return 101;
    if (pthread_create(&b, NULL, sleeps, NULL) != 0)
        return 101;
    /* Cancelled whether it already sleeps or not yet: deferred cancellation acts at sleep. */
    if (pthread_cancel(b) != 0 || pthread_join(b, &cancelled) != 0)
        return 101;
    char extra[64];
    snprintf(extra, sizeof extra, "exit=%ld cancelled=%d cleaned=%d", (long)exited,
             cancelled == PTHREAD_CANCELED, __atomic_load_n(&cleaned, __ATOMIC_SEQ_CST));
    report_self("main", 0, extra);
    return 0;
}

static int by_sched(const cpu_set_t *set) {
    return sched_setaffinity(0, sizeof *set, set);
}

static int by_syscall(const cpu_set_t *set) {
    return (int)syscall(SYS_sched_setaffinity, 0, sizeof *set, set);
}

/* A vfork child asks `pin` for `cpu` and exits 0 when its mask is then exactly that CPU, 2
 * when it is something else, 3 when the call failed; the child's exit code, or -1. */
static int in_vfork_child(int (*pin)(const cpu_set_t *), int cpu) {
    cpu_set_t want, got;
    CPU_ZERO(&want);
    CPU_SET(cpu, &want);
    pid_t child = vfork();
    if (child == 0) {
        if (pin(&want) != 0)
            _exit(3);
        if (sched_getaffinity(0, sizeof got, &got) != 0 || !CPU_EQUAL(&got, &want))
            _exit(2);
        _exit(0);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static int vfork_children(void) {
    busy_work();
    int cpu = (sched_getcpu() + 1) % cpu_count();
    int sched = in_vfork_child(by_sched, cpu);
    int sys = in_vfork_child(by_syscall, cpu);
    /* The children share this thread's memory: the shim must still know it afterwards. */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int rc = by_sched(&set);
    char extra[128];
    snprintf(extra, sizeof extra, "asked=%d vfork_sched=%d vfork_syscall=%d rc=%d", cpu, sched,
             sys, rc);
    report_self("main", 0, extra);
    return 0;
}

/* Kill the process on process_vm_readv, allow everything else. */
static int forbid_process_vm_readv(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* sched_setaffinity fails with EPERM, everything else is allowed. */
static int forbid_setaffinity(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sched_setaffinity, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static void *sandboxed_worker(void *arg) {
    report_self("worker", (long)arg, "");
    return NULL;
}

static int no_setaffinity(void) {
    if (forbid_setaffinity() != 0) {
        fprintf(stderr, "edge_cases: seccomp: %s\n", strerror(errno));
        return 101;
    }
    int failed = 0;
    for (long i = 1; i <= 2 && !failed; i++) {
        pthread_t t;
        failed = pthread_create(&t, NULL, sandboxed_worker, (void *)i);
        if (!failed)
            pthread_join(t, NULL);
    }
    char extra[32];
    snprintf(extra, sizeof extra, "failed=%d", failed);
    report_self("main", 0, extra);
    return 0;
}

static int ask_next_cpu(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((sched_getcpu() + 1) % 2, &set);
    char extra[32];
    snprintf(extra, sizeof extra, "rc=%d", errno_of(sched_setaffinity(0, sizeof set, &set)));
    report_self("main", 0, extra);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "efault") == 0)
        return efault();
    if (strcmp(mode, "main_exit") == 0)
        return main_exit();
    if (strcmp(mode, "vfork") == 0)
        return vfork_children();
    if (strcmp(mode, "seccomp") == 0 || strcmp(mode, "seccomp_exec") == 0) {
        if (forbid_process_vm_readv() != 0) {
            fprintf(stderr, "edge_cases: seccomp: %s\n", strerror(errno));
            return 101;
        }
        if (strcmp(mode, "seccomp") == 0)
            return ask_next_cpu();
        execl("/proc/self/exe", argv[0], "seccomp_after", (char *)NULL);
        return 102;
    }
    if (strcmp(mode, "seccomp_after") == 0)
        return ask_next_cpu();
    if (strcmp(mode, "no_setaffinity") == 0)
        return no_setaffinity();
    if (strcmp(mode, "cancel") == 0)
        return cancel();
    fprintf(stderr,
            "usage: edge_cases efault|main_exit|vfork|seccomp|seccomp_exec|no_setaffinity|cancel\n");
    return 2;
}
