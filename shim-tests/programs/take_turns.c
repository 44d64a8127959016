/* take_turns [SECONDS]: two processes that take turns, as `perf bench sched pipe` does: the
 * parent forks, then parent and child pass one byte back and forth over two pipes for SECONDS
 * (default 2), each running a few microseconds per turn and sleeping in read() while the other
 * runs. Then each reports (report.h) as role=parent or role=child with turns=<its turns>. The
 * two never run at the same time: one CPU serves them better than two, where every wakeup
 * crosses CPUs. */
#include "report.h"
#include <sys/wait.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    if (seconds <= 0) {
        fprintf(stderr, "usage: take_turns [SECONDS > 0]\n");
        return 2;
    }
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent)) {
        perror("pipe");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    int in = child == 0 ? to_child[0] : to_parent[0];
    int out = child == 0 ? to_parent[1] : to_child[1];
    long turns = 0;
    char byte = 0;
    if (child != 0) {
        /* The parent serves first and decides when to stop: a 1 tells the child to end. */
        double end = now() + seconds;
        for (;;) {
            byte = now() >= end;
            if (write(out, &byte, 1) != 1 || read(in, &byte, 1) != 1)
                break;
            turns++;
            if (byte)
                break;
        }
    } else {
        while (read(in, &byte, 1) == 1) {
            turns++;
            if (write(out, &byte, 1) != 1 || byte)
                break;
        }
    }
    char extra[64];
    snprintf(extra, sizeof extra, "turns=%ld", turns);
    report_self(child == 0 ? "child" : "parent", 0, extra);
    if (child != 0) {
        int status = 0;
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    return 0;
}
