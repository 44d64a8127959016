/* kmp_affinity: inside a parallel region every thread asks libomp's kmp_set_affinity for a
 * CPU other than the one it is on, then reports (rc=<kmp_set_affinity's return value>,
 * asked=<the CPU it asked for>). */
#include "report.h"
#include <omp.h>

int main(void) {
#pragma omp parallel
    {
        busy_work();
        int here = sched_getcpu();
        int want = (here + 1) % cpu_count();
        kmp_affinity_mask_t mask;
        kmp_create_affinity_mask(&mask);
        int proc_rc = kmp_set_affinity_mask_proc(want, &mask);
        int rc = kmp_set_affinity(&mask);
        kmp_destroy_affinity_mask(&mask);
#pragma omp barrier
        char extra[96];
        snprintf(extra, sizeof extra, "rc=%d proc_rc=%d asked=%d team=%d", rc, proc_rc, want,
                 omp_get_num_threads());
        report_self("omp", omp_get_thread_num(), extra);
#pragma omp barrier
    }
    return 0;
}
