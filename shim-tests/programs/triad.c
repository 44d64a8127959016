/* triad [MIB [REPEATS [NODE]]]: a memory-bound OpenMP kernel (STREAM's triad, a = b + s * c) over
 * three arrays of MIB MiB each (default 128), first touched by the threads that use them, or with
 * NODE all on that NUMA node (MPOL_BIND, as a GPU rank's pinned buffers sit on its GPU's node);
 * prints
 *   triad <MB/s> MB/s
 * of the best of REPEATS (default 5) passes. For launcher/bench/hybrid.sh: several processes of
 * it, each with its OpenMP team, as a hybrid MPI+OpenMP job runs; for the guest's rank benchmark
 * (docs/bench/ranks-guest.md), ranks near and far from their memory's node. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 128;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (argc > 3) {
        unsigned long node = strtoul(argv[3], NULL, 10), mask[16] = {0};
        if (node >= 1024)
            return 2;
        mask[node / 64] = 1UL << (node % 64);
        /* MPOL_BIND = 2; no libnuma, so that it runs in a bare guest. */
        if (syscall(SYS_set_mempolicy, 2, mask, 1024UL) != 0) {
            perror("triad: set_mempolicy");
            return 2;
        }
    }
    size_t n = mib * 1024 * 1024 / sizeof(double);
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
           *c = malloc(n * sizeof(double));
    if (!a || !b || !c)
        return 2;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    double best = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + 3.0 * c[i];
        double mbs = 3.0 * n * sizeof(double) / (omp_get_wtime() - t0) / 1e6;
        if (mbs > best)
            best = mbs;
    }
    printf("triad %.0f MB/s (a[1]=%.1f)\n", best, a[1]);
    return 0;
}
