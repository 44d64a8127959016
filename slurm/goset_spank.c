/*
 * goset_spank.so: `srun --goset[=ARGS]`, goset on every node of a Slurm step (docs/slurm.md).
 *
 * Owns: the SPANK side only. Per step and node, slurm_spank_user_init starts one step agent,
 * `goset-run --slurm-step ...` (launcher/src/launch/step/), which selects, books, plans and
 * keeps house for every task of the step on that node; slurm_spank_task_init, in each task
 * just before exec, tells the agent the task's pid and the CPUs Slurm bound it to, and sets
 * the environment and first CPU the agent answers with; slurm_spank_exit ends the agent.
 * Must not: decide anything about CPUs (the agent does), or fail a job: every failure is one
 * line on the task's stderr, and the task runs as Slurm placed it.
 *
 * plugstack.conf arguments: default=on (goset unless --goset=off), allow_root_flags (let
 * --cgroup, --steer, --fence through), goset_run=PATH (the agent's program).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(goset, 1);

#ifndef GOSET_RUN
#define GOSET_RUN "/usr/local/bin/goset-run"
#endif

/* How long a node's agent may take to start, and one task's answer (it samples noise for
 * --sample ms, and answers the node's tasks one at a time). Past them the task runs as Slurm
 * placed it: never a hang. */
#define READY_MS 20000
#define ANSWER_MS 60000
/* How long slurm_spank_exit waits for the agent's reports before SIGKILL. */
#define EXIT_MS 10000

static int site_default_on;
static int allow_root_flags;
static char goset_run[4096] = GOSET_RUN;

/* Set in slurmstepd by user_init; the tasks fork from it and inherit them. */
static pid_t agent = -1;
static int life_fd = -1;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
/* Why goset does not place this node's tasks; empty: it does, or it was not asked. */
static char why_not[4608];
static int wanted;
static uint32_t local_tasks, tasks_exited;

static int goset_opt(int val, const char *optarg, int remote);

static struct spank_option goset_option = {
    "goset", "[ARGS]",
    "Pin each task's threads with goset on every node: ARGS are goset-run's flags, "
    "joined by commas (--goset=--smt=pack,--cpu-kind=any); --goset=off opts out "
    "of a site default",
    2, 0, goset_opt};

static int goset_opt(int val, const char *optarg, int remote)
{
    (void)val;
    (void)optarg;
    (void)remote;
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    /* slurmd and prolog/epilog scripts load plugstack.conf too: nothing to do there. */
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT)
        return 0;
    for (int i = 0; i < ac; i++) {
        if (strcmp(av[i], "default=on") == 0)
            site_default_on = 1;
        else if (strcmp(av[i], "default=off") == 0)
            site_default_on = 0;
        else if (strcmp(av[i], "allow_root_flags") == 0)
            allow_root_flags = 1;
        else if (strncmp(av[i], "goset_run=", 10) == 0)
            snprintf(goset_run, sizeof goset_run, "%s", av[i] + 10);
        else
            slurm_error("goset: plugstack.conf: unknown argument '%s' (default=on|off, "
                        "allow_root_flags, goset_run=PATH)",
                        av[i]);
    }
    return spank_option_register(sp, &goset_option) == ESPANK_SUCCESS ? 0 : -1;
}

/* Whether this step asked for goset, and its ARGS ("" for none) in `args`. */
static int asked(spank_t sp, char *args, size_t len)
{
    char *optarg = NULL;
    args[0] = 0;
    if (spank_option_getopt(sp, &goset_option, &optarg) != ESPANK_SUCCESS)
        return site_default_on;
    if (optarg == NULL)
        return 1;
    if (strcmp(optarg, "off") == 0)
        return 0;
    if (strcmp(optarg, "on") != 0)
        snprintf(args, len, "%s", optarg);
    return 1;
}

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* Reads one line from `fd` into `buf` within `ms`; returns its length, -1 on timeout or EOF. */
static int read_line(int fd, char *buf, size_t len, int ms)
{
    size_t have = 0;
    long deadline = now_ms() + ms;
    while (have + 1 < len) {
        long left = deadline - now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return -1;
        ssize_t n = read(fd, buf + have, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        if (buf[have] == '\n')
            break;
        have++;
    }
    buf[have] = 0;
    return (int)have;
}

static void item_u32(spank_t sp, spank_item_t item, uint32_t *out)
{
    if (spank_get_item(sp, item, out) != ESPANK_SUCCESS)
        *out = 0;
}

/* The child side of user_init: drop the root ids slurmstepd keeps as real and saved ids,
 * unblock the signals its threads block, keep no descriptor of slurmstepd's but the three
 * given, then become the agent. Only async-signal-safe calls. */
static void exec_agent(char **argv, int ready_w, int life_r)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    sigset_t none;
    sigemptyset(&none);
    int null = open("/dev/null", O_RDWR);
    if (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0 || null < 0)
        _exit(127);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(life_r, 0);
    dup2(ready_w, 1);
    dup2(null, 2);
    close_range(3, ~0U, 0);
    execv(argv[0], argv);
    static const char msg[] = "error cannot start goset-run\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(127);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    char args[4096], job[16], step[16], tasks[16], cpt[16];
    if (!spank_remote(sp) || !asked(sp, args, sizeof args))
        return 0;
    uint32_t v;
    item_u32(sp, S_JOB_STEPID, &v);
    /* The batch script, the extern and the interactive step (ids from 0xfffffff0) are
     * launchers of steps, not tasks: goset waits for the srun steps inside. */
    if (v >= 0xfffffff0u)
        return 0;
    snprintf(step, sizeof step, "%u", v);
    wanted = 1;
    if (access(goset_run, X_OK) != 0) {
        snprintf(why_not, sizeof why_not, "%s: %s", goset_run, strerror(errno));
        return 0;
    }
    item_u32(sp, S_JOB_ID, &v);
    snprintf(job, sizeof job, "%u", v);
    item_u32(sp, S_JOB_LOCAL_TASK_COUNT, &v);
    local_tasks = v;
    snprintf(tasks, sizeof tasks, "%u", v);
    uint16_t c = 0;
    if (spank_get_item(sp, S_STEP_CPUS_PER_TASK, &c) != ESPANK_SUCCESS)
        c = 1;
    snprintf(cpt, sizeof cpt, "%u", c);
    char *argv[] = {goset_run, "--slurm-step", "--job", job, "--step", step, "--tasks", tasks, "--cpus-per-task", cpt, "--args", args, NULL, NULL};
    if (allow_root_flags)
        argv[12] = "--allow-root-flags";
    int ready[2], life[2];
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(life, O_CLOEXEC) != 0) {
        snprintf(why_not, sizeof why_not, "cannot make a pipe: %s", strerror(errno));
        return 0;
    }
    agent = fork();
    if (agent == 0)
        exec_agent(argv, ready[1], life[0]);
    close(ready[1]);
    close(life[0]);
    life_fd = life[1];
    char line[sizeof why_not];
    int n = agent < 0 ? -1 : read_line(ready[0], line, sizeof line, READY_MS);
    close(ready[0]);
    if (n > 6 && strncmp(line, "ready ", 6) == 0 && strlen(line + 6) < sizeof sock_path) {
        memcpy(sock_path, line + 6, strlen(line + 6) + 1);
        return 0;
    }
    if (n > 6 && strncmp(line, "error ", 6) == 0)
        snprintf(why_not, sizeof why_not, "%s", line + 6);
    else if (n > 6 && strncmp(line, "ready ", 6) == 0)
        snprintf(why_not, sizeof why_not, "the agent's socket path is over %zu bytes",
                 sizeof sock_path - 1);
    else
        snprintf(why_not, sizeof why_not, "%s did not start within %d s", goset_run,
                 READY_MS / 1000);
    return 0;
}

/* The task's CPUs as a cpulist ("0-3,8"). */
static void own_cpus(char *out, size_t len)
{
    cpu_set_t set;
    size_t at = 0;
    out[0] = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && at + 16 < len; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        int end = c;
        while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set))
            end++;
        at += snprintf(out + at, len - at, at ? ",%d" : "%d", c);
        if (end > c)
            at += snprintf(out + at, len - at, "-%d", end);
        c = end;
    }
}

/* Sends the request: NUL-separated fields, the task's stderr alongside (the node's summary
 * line goes there). */
static int send_request(int s, const char *req, size_t len)
{
    int fd = 2;
    char cbuf[CMSG_SPACE(sizeof fd)];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {(void *)req, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof cbuf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(s, &msg, MSG_NOSIGNAL) != (ssize_t)len)
        return -1;
    return shutdown(s, SHUT_WR);
}

/* Applies the agent's answer: `set K=V`, `unset K`, `cpu N`, then `ok` or `error MSG`. */
static int apply_answer(spank_t sp, int s, char *why, size_t why_len)
{
    char line[8192];
    long deadline = now_ms() + ANSWER_MS;
    for (;;) {
        long left = deadline - now_ms();
        if (left <= 0 || read_line(s, line, sizeof line, (int)left) < 0) {
            snprintf(why, why_len, "no answer from this node's goset agent within %d s",
                     ANSWER_MS / 1000);
            return -1;
        }
        if (strcmp(line, "ok") == 0)
            return 0;
        if (strncmp(line, "error ", 6) == 0) {
            snprintf(why, why_len, "%.*s", (int)why_len - 1, line + 6);
            return -1;
        }
        if (strncmp(line, "set ", 4) == 0) {
            char *eq = strchr(line + 4, '=');
            if (eq) {
                *eq = 0;
                spank_setenv(sp, line + 4, eq + 1, 1);
            }
        } else if (strncmp(line, "unset ", 6) == 0) {
            spank_unsetenv(sp, line + 6);
        } else if (strncmp(line, "cpu ", 4) == 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(atoi(line + 4), &set);
            sched_setaffinity(0, sizeof set, &set);
        }
    }
}

/* The request for this task; its length, 0 if it does not fit. */
static size_t request(spank_t sp, char *req, size_t len)
{
    int local = 0, argc = 0;
    uint32_t global = 0;
    char **argv = NULL, cpus[4096], cwd[4096], node[256] = "";
    spank_get_item(sp, S_TASK_ID, &local);
    item_u32(sp, S_TASK_GLOBAL_ID, &global);
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1)
        return 0;
    own_cpus(cpus, sizeof cpus);
    if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof node) != ESPANK_SUCCESS)
        gethostname(node, sizeof node);
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, "/");
    /* The task's visible GPUs, for --near gpu:local-rank: the first variable set and not
     * blank, as goset_plan::ranks::VISIBLE_VARS orders them. */
    static const char *const visible_vars[] = {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                               "HIP_VISIBLE_DEVICES"};
    char visible[1024] = "", value[sizeof visible - 32];
    for (size_t i = 0; i < sizeof visible_vars / sizeof *visible_vars; i++) {
        if (spank_getenv(sp, visible_vars[i], value, sizeof value) == ESPANK_SUCCESS &&
            value[strspn(value, " \t\n")] != 0) {
            snprintf(visible, sizeof visible, "%s=%s", visible_vars[i], value);
            break;
        }
    }
    int n = snprintf(req, len, "task%c%d%c%u%c%d%c%s%c%s%c%s%c%s%c%s", 0, local, 0, global, 0,
                     (int)getpid(), 0, node, 0, cpus, 0, cwd, 0, visible, 0, argv[0]);
    return n > 0 && (size_t)n < len ? (size_t)n + 1 : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!wanted)
        return 0;
    uint32_t global = 0;
    item_u32(sp, S_TASK_GLOBAL_ID, &global);
    char why[sizeof why_not + 64];
    snprintf(why, sizeof why, "%s", why_not);
    if (!why[0]) {
        char req[12288];
        size_t len = request(sp, req, sizeof req);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (len == 0)
            snprintf(why, sizeof why, "the task's command line is too long to send");
        else if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) != 0 ||
                 send_request(s, req, len) != 0)
            snprintf(why, sizeof why, "cannot reach this node's goset agent at %s: %s",
                     sock_path, strerror(errno));
        else
            apply_answer(sp, s, why, sizeof why);
        if (s >= 0)
            close(s);
    }
    if (why[0])
        fprintf(stderr, "goset: task %u runs as Slurm placed it: %s\n", global, why);
    return 0;
}

/* Closes the agent's stdin (the step is over: it reports and exits) and waits for it, at most
 * EXIT_MS, then SIGKILL. */
static void stop_agent(void)
{
    if (agent <= 0)
        return;
    close(life_fd);
    long deadline = now_ms() + EXIT_MS;
    int status;
    while (waitpid(agent, &status, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(agent, SIGKILL);
            waitpid(agent, &status, 0);
            break;
        }
        usleep(20000);
    }
    agent = -1;
}

/* In slurmstepd as each task is reaped: after the node's last, the agent reports while the
 * step's output is still read, and before Slurm ends what is left of the step. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp) && agent > 0 && ++tasks_exited >= local_tasks)
        stop_agent();
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp))
        stop_agent();
    return 0;
}
