/* exec_bare execve|spawn PROG [ARGS...]: the main thread reports (role=parent), then starts
 * PROG with an empty environment, so without the shim: `execve` in a forked child, or
 * `posix_spawn`. It waits for PROG and exits with its status. */
#include "report.h"
#include <spawn.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: exec_bare execve|spawn PROG [ARGS...]\n");
        return 100;
    }
    char *bare[] = {NULL};
    report_self("parent", 0, "");
    pid_t pid;
    if (strcmp(argv[1], "spawn") == 0) {
        int rc = posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, bare);
        if (rc != 0) {
            fprintf(stderr, "exec_bare: posix_spawn: %s\n", strerror(rc));
            return 101;
        }
    } else {
        pid = fork();
        if (pid < 0) {
            perror("exec_bare: fork");
            return 101;
        }
        if (pid == 0) {
            execve(argv[2], argv + 2, bare);
            perror("exec_bare: execve");
            _exit(127);
        }
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("exec_bare: waitpid");
            return 101;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
