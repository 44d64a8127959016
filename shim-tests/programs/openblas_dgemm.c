/* openblas_dgemm: OpenBLAS sizes its thread pool from the affinity mask when it loads
 * (capped by OPENBLAS_NUM_THREADS / OMP_NUM_THREADS). Like numpy, this loads it late, with
 * dlopen from main, after the shim placed the main thread (linked at build time, its
 * constructor would run before the shim narrows the main thread, and so see the whole start
 * mask). It multiplies two 1200x1200 matrices a few times with cblas_dgemm, checks the
 * result, then reports the pool size (pool=openblas_get_num_threads()) on the main thread's
 * line and one line per thread of the process from /proc (role=task): the CPU it last ran on
 * (cpu=, stat field 39), its Cpus_allowed_list and the CPU time it used (ticks=,
 * utime+stime), so the test sees where the busy threads ran. Exits 77 when OpenBLAS cannot
 * be loaded. */
#include "report.h"
#include <dirent.h>
#include <dlfcn.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111 };
typedef void (*dgemm_fn)(int order, int transa, int transb, int m, int n, int k, double alpha,
                         const double *a, int lda, const double *b, int ldb, double beta,
                         double *c, int ldc);
typedef int (*num_threads_fn)(void);

#define N 1200
#define ROUNDS 4

/* Reports thread `tid` of this process from its /proc entries. */
static void report_task(long tid) {
    char path[96], stat[2048], allowed[256], extra[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0)
        return;
    stat[n] = 0;
    /* Fields after "pid (comm) ": state is field 3; utime 14, stime 15, processor 39. */
    char *at = strrchr(stat, ')');
    if (!at)
        return;
    at += 2;
    long utime = 0, stime = 0, processor = -1;
    for (int field = 3; *at && field <= 39; field++) {
        if (field == 14)
            utime = atol(at);
        if (field == 15)
            stime = atol(at);
        if (field == 39)
            processor = atol(at);
        at = strchr(at, ' ');
        if (!at)
            break;
        at++;
    }
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    read_allowed(path, allowed, sizeof allowed);
    snprintf(extra, sizeof extra, "ticks=%ld", utime + stime);
    emit_line("report role=task id=%ld pid=%d tid=%ld cpu=%ld allowed=%s %s", tid, (int)getpid(),
              tid, processor, allowed, extra);
}

int main(void) {
    void *blas = dlopen("libopenblas.so.0", RTLD_NOW);
    dgemm_fn cblas_dgemm = blas ? (dgemm_fn)dlsym(blas, "cblas_dgemm") : NULL;
    num_threads_fn openblas_get_num_threads =
        blas ? (num_threads_fn)dlsym(blas, "openblas_get_num_threads") : NULL;
    if (!cblas_dgemm || !openblas_get_num_threads) {
        fprintf(stderr, "openblas_dgemm: cannot load OpenBLAS: %s\n", dlerror());
        return 77;
    }
    double *a = malloc(sizeof(double) * N * N), *b = malloc(sizeof(double) * N * N),
           *c = malloc(sizeof(double) * N * N);
    if (!a || !b || !c)
        return 102;
    for (long i = 0; i < (long)N * N; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
    }
    for (int r = 0; r < ROUNDS; r++)
        cblas_dgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, N, N, N, 1.0, a, N, b, N, 0.0, c, N);
    if (c[0] != 2.0 * N || c[(long)N * N - 1] != 2.0 * N) {
        fprintf(stderr, "openblas_dgemm: wrong result %f\n", c[0]);
        return 103;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "pool=%d", openblas_get_num_threads());
    report_self("main", 0, extra);
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return 104;
    struct dirent *e;
    while ((e = readdir(dir)))
        if (e->d_name[0] != '.')
            report_task(atol(e->d_name));
    closedir(dir);
    return 0;
}
