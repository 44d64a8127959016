/* A thread with a known number of voluntary context switches.
 *
 * The thread sleeps 200 times for 1 ms (each nanosleep blocks: one voluntary switch), reads
 * its own nr_voluntary_switches from /proc/thread-self/sched, then sleeps once more for
 * argv[1] ms (one more switch) so that the housekeeper polls it while it is idle. main prints
 *   sleeper tid <tid> voluntary <n> migrations <m>
 * with the thread's own counts after the 200 sleeps. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int tid;
static long voluntary = -1, migrations = -1;
static long linger_ms = 500;

static long sched_field(const char *key) {
    FILE *f = fopen("/proc/thread-self/sched", "r");
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == ':')) {
            char *colon = strchr(line, ':');
            if (colon) v = atol(colon + 1);
        }
    }
    fclose(f);
    return v;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *sleeper(void *arg) {
    (void)arg;
    tid = (int)syscall(SYS_gettid);
    for (int i = 0; i < 200; i++) sleep_ms(1);
    voluntary = sched_field("nr_voluntary_switches");
    migrations = sched_field("se.nr_migrations");
    sleep_ms(linger_ms);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) linger_ms = atol(argv[1]);
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_join(t, NULL);
    printf("sleeper tid %d voluntary %ld migrations %ld\n", tid, voluntary, migrations);
    return 0;
}
