/* numa_memory: where the kernel will put this process's memory, seen two ways.
 *
 * Reports (report.h) role=mem id=0 with
 *   policy=<mode> nodes=<nodelist>  from get_mempolicy(2) (mode 0 default, 1 preferred, 2 bind,
 *                                   3 interleave; nodes empty as "-")
 *   N<k>=<pages> ...                the node counts of a freshly touched 4 MiB buffer's line in
 *                                   /proc/self/numa_maps
 *   map=<policy>                    that line's policy word ("default", "bind:1", ...)
 * The syscall is made directly: no libnuma, so the program runs in a bare guest. */
#include "report.h"
#include <sys/mman.h>

#define MAX_NODES 1024

int main(void) {
    int mode = -1;
    unsigned long mask[MAX_NODES / (8 * sizeof(unsigned long))] = {0};
    if (syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)MAX_NODES, NULL, 0UL) != 0) {
        fprintf(stderr, "numa_memory: get_mempolicy: %s\n", strerror(errno));
        return 1;
    }
    char nodes[256] = "";
    size_t used = 0;
    for (int node = 0; node < MAX_NODES && used + 8 < sizeof nodes; node++)
        if (mask[node / (8 * sizeof(unsigned long))] >> (node % (8 * sizeof(unsigned long))) & 1)
            used += snprintf(nodes + used, sizeof nodes - used, "%s%d", used ? "," : "", node);

    size_t size = 4 << 20;
    char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        fprintf(stderr, "numa_memory: mmap: %s\n", strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < size; i += 4096)
        buf[i] = 1;

    /* The buffer's numa_maps line starts with its address in hex. */
    char start[32], line[1024] = "", text[65536];
    snprintf(start, sizeof start, "%lx ", (unsigned long)buf);
    int fd = open("/proc/self/numa_maps", O_RDONLY | O_CLOEXEC);
    ssize_t got = 0, n;
    while (fd >= 0 && got < (ssize_t)sizeof text - 1 &&
           (n = read(fd, text + got, sizeof text - 1 - got)) > 0)
        got += n;
    if (fd >= 0)
        close(fd);
    text[got > 0 ? got : 0] = 0;
    for (char *at = text; at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL)
        if (strncmp(at, start, strlen(start)) == 0) {
            size_t len = strcspn(at, "\n");
            snprintf(line, sizeof line, "%.*s", (int)len, at);
            break;
        }
    if (!line[0]) {
        fprintf(stderr, "numa_memory: no numa_maps line for %s\n", start);
        return 1;
    }

    /* "<addr> <policy> anon=.. dirty=.. N0=.. kernelpagesize_kB=..": keep the policy and N<k>. */
    char extra[1024];
    used = snprintf(extra, sizeof extra, "policy=%d nodes=%s", mode, nodes[0] ? nodes : "-");
    char *save, *word = strtok_r(line, " ", &save);
    for (int i = 0; word && used + 2 < sizeof extra; i++, word = strtok_r(NULL, " ", &save)) {
        if (i == 1)
            used += snprintf(extra + used, sizeof extra - used, " map=%s", word);
        else if (word[0] == 'N' && word[1] >= '0' && word[1] <= '9')
            used += snprintf(extra + used, sizeof extra - used, " %s", word);
    }
    report_self("mem", 0, extra);
    munmap(buf, size);
    return 0;
}
