/* Shared by the shim-tests target programs: real work, then one report line per thread.
 *
 * A report is a single write(2) to stdout of one line:
 *   report role=<role> id=<n> pid=<pid> tid=<tid> cpu=<sched_getcpu> allowed=<Cpus_allowed_list> [k=v ...]
 * The test parses these lines; any other line on stdout is a failure (the shim must never
 * write there). Messages about the program itself go to stderr. */
#ifndef GOSET_TEST_REPORT_H
#define GOSET_TEST_REPORT_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A few milliseconds of arithmetic, so that the scheduler has had every chance to move the
 * thread before it reports. Fixed work, not a timed wait. */
#ifndef BUSY_ITERATIONS
#define BUSY_ITERATIONS 3000000L
#endif
static inline double busy_work(void) {
    volatile double x = 1.0;
    for (long i = 0; i < BUSY_ITERATIONS; i++)
        x = x * 1.0000001 + 0.5 / (double)(i + 1);
    return x;
}

/* Reads the Cpus_allowed_list line of a status file (e.g. /proc/thread-self/status) into buf. */
static inline void read_allowed(const char *status_path, char *buf, size_t len) {
    snprintf(buf, len, "?");
    int fd = open(status_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char text[8192];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return;
    text[n] = 0;
    const char *key = "Cpus_allowed_list:";
    char *at = strstr(text, key);
    if (!at)
        return;
    at += strlen(key);
    while (*at == ' ' || *at == '\t')
        at++;
    size_t i = 0;
    while (at[i] && at[i] != '\n' && i + 1 < len) {
        buf[i] = at[i];
        i++;
    }
    buf[i] = 0;
}

/* Writes one line to stdout with a single write(2). */
static inline void emit_line(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t off = 0;
    while (off < n) {
        ssize_t w = write(1, line + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += w;
    }
}

/* Reports the calling thread after it has done real work; `extra` is appended as is ("" for none). */
static inline void report_self(const char *role, long id, const char *extra) {
    busy_work();
    char allowed[256];
    read_allowed("/proc/thread-self/status", allowed, sizeof allowed);
    emit_line("report role=%s id=%ld pid=%d tid=%ld cpu=%d allowed=%s%s%s", role, id, (int)getpid(),
              (long)syscall(SYS_gettid), sched_getcpu(), allowed, extra[0] ? " " : "", extra);
}

/* The number of configured CPUs, for picking a CPU other than the current one. */
static inline int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_CONF);
    return n > 0 ? (int)n : 1;
}

#endif
