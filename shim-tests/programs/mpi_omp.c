/* mpi_omp: an MPI rank with an OpenMP team (OMP_NUM_THREADS, which goset-run sets to the
 * rank's block). After MPI_Init every thread of the team works until its mask is one CPU (at
 * most 200 rounds: a rank's main thread widened while it took turns in MPI_Init gets a CPU of
 * its own at the housekeeper's next poll once it computes), then reports from inside the
 * parallel region (role=omp, id = its thread number, rank=<rank> team=<size>); a barrier over
 * all ranks, and the rank ends. Built with mpicc -fopenmp. */
#include "report.h"
#include <mpi.h>
#include <omp.h>
/* Works until this thread may run on one CPU only, or 200 rounds of busy_work have passed. */
static void work_until_pinned(void) {
    char allowed[64];
    for (int i = 0; i < 200; i++) {
        busy_work();
        read_allowed("/proc/thread-self/status", allowed, sizeof allowed);
        if (!strchr(allowed, ',') && !strchr(allowed, '-'))
            return;
    }
}

int main(int argc, char **argv) {
    int rank = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char extra[64];
#pragma omp parallel private(extra)
    {
        work_until_pinned();
#pragma omp barrier
        snprintf(extra, sizeof extra, "rank=%d team=%d", rank, omp_get_num_threads());
        report_self("omp", omp_get_thread_num(), extra);
#pragma omp barrier
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
