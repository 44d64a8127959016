/* Names itself argv[1] (prctl PR_SET_NAME: any bytes but NUL, 15 at most) and starts one
 * thread, so that the shim's create record carries the name into the report. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    prctl(PR_SET_NAME, argv[1], 0, 0, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0) return 1;
    pthread_join(t, NULL);
    return 0;
}
