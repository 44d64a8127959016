/* omp [EXIT_CODE]: one parallel region; every OpenMP thread reports from inside, with its
 * omp_get_thread_num() as id. Built with gcc -fopenmp (libgomp) and clang -fopenmp (libomp). */
#include "report.h"
#include <omp.h>

int main(int argc, char **argv) {
    int code = argc > 1 ? atoi(argv[1]) : 0;
    char extra[64];
#pragma omp parallel private(extra)
    {
        busy_work();
#pragma omp barrier
        snprintf(extra, sizeof extra, "team=%d", omp_get_num_threads());
        report_self("omp", omp_get_thread_num(), extra);
#pragma omp barrier
    }
    report_self("main", 0, "");
    return code;
}
