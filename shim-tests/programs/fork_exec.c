/* fork_exec exec PROG [ARGS...]: the main thread reports, forks, and the child execs PROG; the
 * parent stays single-threaded and alive until the child ends, then exits with its status.
 * fork_exec spawn|vfork PROG [ARGS...]: the same, PROG started by posix_spawn, or by vfork and
 * execv (no atfork handler runs in either child).
 * fork_exec fork: the same, but the child does not exec: it reports from its main thread and
 * from one thread it creates. */
#include "report.h"
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

static void *child_worker(void *arg) {
    (void)arg;
    report_self("child-worker", 1, "");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "fork") != 0 && argc < 3)) {
        fprintf(stderr, "usage: fork_exec exec|spawn|vfork PROG [ARGS...] | fork_exec fork\n");
        return 100;
    }
    int do_exec = strcmp(argv[1], "exec") == 0;
    report_self("parent", 0, "");
    pid_t pid;
    if (strcmp(argv[1], "spawn") == 0) {
        int rc = posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ);
        if (rc != 0) {
            fprintf(stderr, "fork_exec: posix_spawn: %s\n", strerror(rc));
            return 101;
        }
    } else if (strcmp(argv[1], "vfork") == 0) {
        pid = vfork();
        if (pid == 0) {
            execv(argv[2], argv + 2);
            _exit(127);
        }
    } else {
        pid = fork();
    }
    if (pid < 0) {
        perror("fork_exec: fork");
        return 101;
    }
    if (pid == 0) {
        if (do_exec) {
            execv(argv[2], argv + 2);
            perror("fork_exec: execv");
            _exit(127);
        }
        report_self("child-main", 0, "");
        pthread_t t;
        if (pthread_create(&t, NULL, child_worker, NULL) != 0)
            _exit(101);
        pthread_join(t, NULL);
        _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("fork_exec: waitpid");
            return 101;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
