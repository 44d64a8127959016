/* mpi_rank: an Open MPI rank. After MPI_Init and a barrier, the main thread reports (id = rank),
 * then lists every thread of its own process (role=rank-thread) and of its parent, the MPI
 * launcher (role=launcher-thread), with comm=<thread name> and the CPU it last ran on. */
#include "report.h"
#include <dirent.h>
#include <mpi.h>

/* Field 39 of /proc/<pid>/task/<tid>/stat: the CPU the thread last ran on. */
static int last_cpu(const char *stat_path) {
    char text[2048];
    int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return -1;
    text[n] = 0;
    char *p = strrchr(text, ')'); /* comm may hold spaces and parentheses */
    if (!p)
        return -1;
    int field = 2;
    for (; *p && field < 39; p++)
        if (*p == ' ')
            field++;
    return atoi(p);
}

static void list_threads(int pid, const char *role, int rank) {
    char dir_path[64];
    snprintf(dir_path, sizeof dir_path, "/proc/%d/task", pid);
    DIR *dir = opendir(dir_path);
    if (!dir) {
        fprintf(stderr, "mpi_rank: cannot open %s\n", dir_path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[384], comm[64] = "?", allowed[256];
        snprintf(path, sizeof path, "%s/%s/comm", dir_path, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, comm, sizeof comm - 1);
            close(fd);
            comm[n > 0 ? n : 0] = 0;
            for (char *c = comm; *c; c++)
                if (*c == '\n')
                    *c = 0;
                else if (*c == ' ' || *c == '=')
                    *c = '_';
        }
        snprintf(path, sizeof path, "%s/%s/status", dir_path, e->d_name);
        read_allowed(path, allowed, sizeof allowed);
        snprintf(path, sizeof path, "%s/%s/stat", dir_path, e->d_name);
        emit_line("report role=%s id=%d pid=%d tid=%s cpu=%d allowed=%s comm=%s", role, rank, pid,
                  e->d_name, last_cpu(path), allowed, comm);
    }
    closedir(dir);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    char extra[32];
    snprintf(extra, sizeof extra, "size=%d", size);
    report_self("rank", rank, extra);
    list_threads(getpid(), "rank-thread", rank);
    list_threads(getppid(), "launcher-thread", rank);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
