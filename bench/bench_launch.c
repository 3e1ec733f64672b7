/* SPDX-License-Identifier: Apache-2.0
 * bench_launch: the agent's own costs, each against a reference measured in the same run.
 *   launch   wall time of `ddprun --standalone --nproc_per_node=8 /bin/true` vs a plain
 *            fork+exec+wait of the same 8 processes (the floor), median of N runs, interleaved;
 *            and the same with --numa_binding=node against without (the binding's own cost)
 *   restart  time from a worker's death to every worker of the new attempt running
 *   rss      peak RSS (VmHWM) of ddprun supervising 8 workers
 * Usage: bench_launch DDPRUN FAKE_WORKER [RUNS] (RUNS 1-1000, default 30). Prints markdown table
 * rows; exits 1 when a figure cannot be measured (a run of either command failed), 2 on bad
 * arguments. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs argv with stdout/stderr to /dev/null and returns its wall time in ms (-1 on failure). */
static double time_cmd(char *const *argv) {
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    double t = now_ms() - t0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

/* The floor: this process forks and execs 8 /bin/true and waits for all of them. Run as a
 * separate program (argv[1] == "floor") so that it pays the same exec cost ddprun pays. */
static int floor_main(void) {
    pid_t pids[8];
    for (int i = 0; i < 8; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < 8; i++)
        waitpid(pids[i], NULL, 0);
    return 0;
}

static long long read_ll(const char *path) {
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* One restart measurement: rank 1 fails on attempt 0; rank 0 exits on SIGTERM. */
static double restart_once(const char *ddprun, const char *fw) {
    char dir[] = "/tmp/ddpbench.XXXXXX";
    if (mkdtemp(dir) == NULL)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("FW_DIR", dir, 1);
        setenv("FW_RANK", "1", 1);
        setenv("FW_EXIT", "1", 1);
        setenv("FW_FAIL_ATTEMPTS", "1", 1);
        setenv("FW_DELAY_MS", "100", 1);
        setenv("FW_SLEEP_MS", "200", 1);
        execl(ddprun, "ddprun", "--standalone", "--nproc_per_node=2", "--max_restarts=1", fw,
              (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/tfail.1.0", dir);
    long long death = read_ll(p);
    long long last = -1;
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/t.%d.1", dir, r);
        long long t = read_ll(p);
        if (t < 0)
            last = -1, r = 2;
        else if (t > last)
            last = t;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return -1;
    if (death < 0 || last < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return (last - death) / 1e6;
}

/* Peak RSS (VmHWM) in KiB of ddprun supervising 8 fake workers, polled every 20 ms until it
 * exits; -1 when it could not be read or ddprun did not exit 0. */
static long peak_rss_kib(const char *ddprun, const char *fw) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("FW_SLEEP_MS", "1500", 1);
        execl(ddprun, "ddprun", "--standalone", "--nproc_per_node=8", fw, (char *)NULL);
        _exit(127);
    }
    long hwm = -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            char line[256];
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "VmHWM:", 6) == 0) {
                    long v = strtol(line + 6, NULL, 10);
                    if (v > hwm)
                        hwm = v;
                }
            fclose(f);
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return -1;
            break;
        }
        usleep(20000);
    }
    return hwm;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "floor") == 0)
        return floor_main();
    if (argc < 3) {
        fprintf(stderr, "usage: bench_launch DDPRUN FAKE_WORKER [RUNS]\n");
        return 2;
    }
    int runs = 30;
    if (argc > 3) {
        char *end;
        long v = strtol(argv[3], &end, 10);
        if (*argv[3] == '\0' || *end != '\0' || v < 1 || v > 1000) {
            fprintf(stderr, "bench_launch: RUNS must be 1-1000, got '%s'\n", argv[3]);
            return 2;
        }
        runs = (int)v;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return 1;
    self[n] = '\0';
    char *floor_argv[] = {self, "floor", NULL};
    char *ddp_argv[] = {argv[1], "--standalone", "--nproc_per_node=8", "/bin/true", NULL};
    char *numa_argv[] = {
        argv[1], "--standalone", "--nproc_per_node=8", "--numa_binding=node", "/bin/true", NULL};
    double *tf = calloc((size_t)runs, sizeof *tf), *td = calloc((size_t)runs, sizeof *td);
    double *tr = calloc((size_t)runs, sizeof *tr), *tn = calloc((size_t)runs, sizeof *tn);
    /* Warm-up, then interleave so that all see the same machine state. Binding needs a NUMA
     * topology in sysfs: without one that series is left out. */
    time_cmd(floor_argv);
    time_cmd(ddp_argv);
    int numa = time_cmd(numa_argv) >= 0;
    for (int i = 0; i < runs; i++) {
        tf[i] = time_cmd(floor_argv);
        td[i] = time_cmd(ddp_argv);
        tn[i] = numa ? time_cmd(numa_argv) : 0;
        if (tf[i] < 0 || td[i] < 0 || tn[i] < 0) {
            fprintf(stderr, "bench_launch: a run failed\n");
            return 1;
        }
    }
    double mf = bench_median(tf, runs), md = bench_median(td, runs);
    printf("| launch 8 x /bin/true: ddprun --standalone | %.2f ms | floor fork+exec x8 %.2f ms | "
           "%.2fx (target <= 1.5x) |\n",
           md, mf, md / mf);
    if (numa) {
        double mn = bench_median(tn, runs);
        printf("| launch 8 x /bin/true with --numa_binding=node | %.2f ms | without %.2f ms | "
               "%.2fx |\n",
               mn, md, mn / md);
    } else {
        printf("| launch with --numa_binding=node | not measured: no NUMA topology in sysfs | - "
               "| - |\n");
    }
    for (int i = 0; i < runs; i++) {
        if ((tr[i] = restart_once(argv[1], argv[2])) < 0) {
            fprintf(stderr, "bench_launch: restart run %d of %d failed (%s with %s)\n", i + 1, runs,
                    argv[1], argv[2]);
            return 1;
        }
    }
    printf("| restart latency, 2 workers (death -> all running) | %.2f ms median of %d | "
           "- | target <= 25 ms |\n",
           bench_median(tr, runs), runs);
    long rss = peak_rss_kib(argv[1], argv[2]);
    if (rss <= 0) {
        fprintf(stderr, "bench_launch: peak RSS of %s supervising 8 workers not measured\n",
                argv[1]);
        return 1;
    }
    printf("| ddprun peak RSS supervising 8 workers | %.2f MiB | - | target <= 8 MiB |\n",
           rss / 1024.0);
    free(tf);
    free(td);
    free(tr);
    free(tn);
    return 0;
}
