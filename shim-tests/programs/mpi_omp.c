/* mpi_omp: an MPI rank with an OpenMP team (OMP_NUM_THREADS, which goset-run sets to the
 * rank's block). After MPI_Init every thread of the team works, then reports from inside the
 * parallel region (role=omp, id = its thread number, rank=<rank> team=<size>); a barrier over
 * all ranks, and the rank ends. Built with mpicc -fopenmp. */
#include "report.h"
#include <mpi.h>
#include <omp.h>
int main(int argc, char **argv) {
    int rank = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char extra[64];
#pragma omp parallel private(extra)
    {
        busy_work();
#pragma omp barrier
        snprintf(extra, sizeof extra, "rank=%d team=%d", rank, omp_get_num_threads());
        report_self("omp", omp_get_thread_num(), extra);
#pragma omp barrier
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
