/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for agent/stacks.c: the kernel's view of a sleeping process group from /proc, every
 * process of a group, the budget against a debugger that hangs (a fake gdb on PATH), gdb naming
 * the function a native process spins in (when gdb is installed), the forked helper, and the
 * summary head. Every child is started here, in its own process group, and killed by pid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddp_file.h"
#include "ddp_time.h"
#include "stacks.h"

/* Bound of every wait in these tests: children start in milliseconds, gdb in a few seconds. */
#define WAIT_MS 10000
/* Slack over a capture's budget: fork, exec, the kill and the /proc reads. Generous on purpose:
 * this checks that the budget bounds the call, not how fast the machine is. */
#define BUDGET_SLACK_MS 5000

static char tmpdir[64];
static char out_path[128];
static char exe_dir[PATH_MAX];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_agent_stacks-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(out_path, sizeof out_path, "%s/stacks.txt", tmpdir);
    ssize_t n = readlink("/proc/self/exe", exe_dir, sizeof exe_dir - 1);
    if (n <= 0)
        return -1;
    exe_dir[n] = '\0';
    *strrchr(exe_dir, '/') = '\0';
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts argv leading a new process group of its own; the child dies with this test. */
static pid_t start_group(char *const argv[]) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* Waits (bounded) until pid has exec'd the program whose comm is want. */
static void wait_comm(pid_t pid, const char *want) {
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    for (int waited = 0; waited < WAIT_MS; waited += 10) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            int ok = fgets(buf, sizeof buf, f) != NULL && strncmp(buf, want, strlen(want)) == 0;
            fclose(f);
            if (ok)
                return;
        }
        sleep_ms(10);
    }
    fail_msg("process %d never became %s", (int)pid, want);
}

static void stop(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* The whole file; caller frees. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static pid_t start_sleep(void) {
    char *const argv[] = {"/bin/sleep", "30", NULL};
    pid_t pid = start_group(argv);
    wait_comm(pid, "sleep");
    return pid;
}

/* The kernel's view names the process and shows it sleeping. */
static void test_proc_only_sleeping(void **state) {
    (void)state;
    pid_t pid = start_sleep();
    ddp_err_t e;
    ddp_err_clear(&e);
    /* The child may be between exec and its first nanosleep: give it a moment to block. */
    sleep_ms(100);
    assert_int_equal(agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), 5000,
                                           AGENT_STACKS_PROC_ONLY, &e),
                     0);
    stop(pid);
    char *s = slurp(out_path);
    char want[64];
    snprintf(want, sizeof want, "=== process %d (sleep) state S", (int)pid);
    assert_non_null(strstr(s, want));
    assert_non_null(strstr(s, "cmdline: /bin/sleep 30"));
    assert_non_null(strstr(s, "tools: /proc only"));
    snprintf(want, sizeof want, "thread %d (sleep) state S wchan ", (int)pid);
    char *thread = strstr(s, want);
    assert_non_null(thread);
    assert_true(strstr(thread, "nanosleep") != NULL || strstr(thread, "hrtimer") != NULL ||
                strstr(thread, "sleep") != NULL);
    assert_null(strstr(s, "cut after"));
    free(s);
}

/* Every process of the group is captured, its leader first. */
static void test_whole_group(void **state) {
    (void)state;
    /* The group leader's background child is reparented to us when its parent dies: reap it here.
     */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    char *const argv[] = {"/bin/sh", "-c", "/bin/sleep 30 & exec /bin/sleep 31", NULL};
    pid_t pid = start_group(argv);
    pid_t pids[4] = {0};
    int n = 0;
    for (int waited = 0; waited < WAIT_MS && n != 2; waited += 10, sleep_ms(10))
        n = agent__stacks_group_pids(pid, pids, 4);
    assert_int_equal(n, 2);
    assert_int_equal(pids[0], pid);
    wait_comm(pid, "sleep");
    assert_int_equal(agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), 5000,
                                           AGENT_STACKS_PROC_ONLY, NULL),
                     0);
    kill(pids[1], SIGKILL);
    stop(pid);
    waitpid(pids[1], NULL, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    char *s = slurp(out_path);
    char want[64];
    assert_non_null(strstr(s, ": 2 processes;"));
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want, "=== process %d (sleep)", (int)pids[i]);
        assert_non_null(strstr(s, want));
    }
    assert_non_null(strstr(s, "cmdline: /bin/sleep 31"));
    free(s);
}

static void test_errors(void **state) {
    (void)state;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(agent__stacks_capture(1, out_path, ddp_file_dir_len(out_path), 100, 0, &e),
                     -EINVAL);
    /* A pid just reaped leads no group. */
    pid_t gone = fork();
    assert_true(gone >= 0);
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    ddp_err_clear(&e);
    assert_int_equal(agent__stacks_capture(gone, out_path, ddp_file_dir_len(out_path), 100, 0, &e),
                     -ESRCH);
    assert_non_null(strstr(e.text, "is empty"));
    pid_t pid = start_sleep();
    ddp_err_clear(&e);
    assert_int_equal(agent__stacks_capture(pid, "/nonexistent/dir/stacks.txt", 16, 100, 0, &e),
                     -ENOENT);
    stop(pid);
    assert_non_null(strstr(e.text, "/nonexistent/dir/stacks.txt"));
    char head[64];
    assert_int_equal(agent__stacks_head("/nonexistent/stacks.txt", 5, head, sizeof head), -ENOENT);
}

/* Writes an executable shell script. */
static void write_script(const char *path, const char *body) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

/* A debugger that never returns is killed at the budget; the file says so and still holds the
 * kernel's view. */
static void test_budget_hanging_tool(void **state) {
    (void)state;
    char bin[128], script[160], body[256], pidfile[160];
    snprintf(bin, sizeof bin, "%s/bin", tmpdir);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(script, sizeof script, "%s/gdb", bin);
    snprintf(pidfile, sizeof pidfile, "%s/gdb.pid", tmpdir);
    snprintf(body, sizeof body, "echo $$ > %s\nexec /bin/sleep 60", pidfile);
    write_script(script, body);
    char *old_path = strdup(getenv("PATH"));
    setenv("PATH", bin, 1);
    pid_t pid = start_sleep();
    const int budget = 700;
    uint64_t t0 = ddp_now_ms();
    int rc = agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), budget, 0, NULL);
    uint64_t took = ddp_now_ms() - t0;
    setenv("PATH", old_path, 1);
    free(old_path);
    stop(pid);
    assert_int_equal(rc, 0);
    assert_true(took < (uint64_t)budget + BUDGET_SLACK_MS);
    char *s = slurp(out_path);
    assert_non_null(strstr(s, "tools: gdb, /proc;"));
    assert_non_null(strstr(s, "--- gdb thread apply all bt: cut after "));
    char want[64];
    snprintf(want, sizeof want, "thread %d (sleep)", (int)pid);
    assert_non_null(strstr(s, want));
    free(s);
    /* The fake debugger was killed and reaped by the capture. */
    s = slurp(pidfile);
    pid_t tool = (pid_t)atoi(s);
    free(s);
    assert_true(tool > 0);
    assert_int_equal(kill(tool, 0), -1);
    assert_int_equal(errno, ESRCH);
}

/* A tool found through ".", an empty entry or a relative PATH entry (a "./gdb" in the working
 * directory) is never run: the capture runs as the agent's user, often root. */
static void test_relative_path_entries_not_trusted(void **state) {
    (void)state;
    char sub[128], script[160], body[256], marker[160], cwd[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/rel", tmpdir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(marker, sizeof marker, "%s/ran", tmpdir);
    snprintf(body, sizeof body, "echo ran > %s", marker);
    const char *tools[] = {"gdb", "py-spy", "eu-stack"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(script, sizeof script, "%s/%s", tmpdir, tools[i]);
        write_script(script, body);
        snprintf(script, sizeof script, "%s/%s", sub, tools[i]);
        write_script(script, body);
    }
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    char *old_path = strdup(getenv("PATH"));
    setenv("PATH", ".:rel::./rel:/nonexistent-ddprun-bin", 1);
    pid_t pid = start_sleep();
    int rc = agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), 2000, 0, NULL);
    setenv("PATH", old_path, 1);
    free(old_path);
    assert_int_equal(chdir(cwd), 0);
    stop(pid);
    assert_int_equal(rc, 0);
    char *s = slurp(out_path);
    assert_non_null(strstr(s, "tools: /proc only"));
    free(s);
    assert_int_equal(access(marker, F_OK), -1);
}

/* A symbolic link planted where the stacks file goes (to a file the agent's user owns) is
 * replaced, never written through; a link for the directory above it is refused. */
static void test_planted_link_not_followed(void **state) {
    (void)state;
    char victim[160], sub[128], path[192];
    snprintf(victim, sizeof victim, "%s/victim", tmpdir);
    write_script(victim, "# precious");
    unlink(out_path); /* an earlier test's capture */
    assert_int_equal(symlink(victim, out_path), 0);
    pid_t pid = start_sleep();
    assert_int_equal(agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), 5000,
                                           AGENT_STACKS_PROC_ONLY, NULL),
                     0);
    char *s = slurp(victim);
    assert_string_equal(s, "#!/bin/sh\n# precious\n");
    free(s);
    struct stat st;
    assert_int_equal(lstat(out_path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* attempt_0 -> elsewhere: the capture refuses, naming the link. */
    snprintf(sub, sizeof sub, "%s/elsewhere", tmpdir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/attempt_0", tmpdir);
    assert_int_equal(symlink(sub, path), 0);
    snprintf(path, sizeof path, "%s/attempt_0/stacks.txt", tmpdir);
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(
        agent__stacks_capture(pid, path, strlen(tmpdir), 1000, AGENT_STACKS_PROC_ONLY, &e), -ELOOP);
    stop(pid);
    assert_non_null(strstr(e.text, "attempt_0: a symbolic link, not followed"));
    snprintf(path, sizeof path, "%s/stacks.txt", sub);
    assert_int_equal(access(path, F_OK), -1);
}

static int gdb_installed(void) {
    const char *path = getenv("PATH");
    char *dup = strdup(path != NULL ? path : "");
    int found = 0;
    for (char *dir = strtok(dup, ":"); dir != NULL && !found; dir = strtok(NULL, ":")) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/gdb", dir);
        found = access(p, X_OK) == 0;
    }
    free(dup);
    return found;
}

/* gdb's backtrace names the function a native process spins in. */
static void test_gdb_names_function(void **state) {
    (void)state;
    if (!gdb_installed())
        skip();
    char helper[PATH_MAX + 32];
    snprintf(helper, sizeof helper, "%s/../spin_worker", exe_dir);
    assert_int_equal(access(helper, X_OK), 0);
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        execl(helper, "spin_worker", (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    /* Its line says it is in spin_here_forever, past any start-up code. */
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    char line[16] = "";
    int ready = poll(&pfd, 1, WAIT_MS) == 1 && read(fds[0], line, sizeof line - 1) > 0;
    close(fds[0]);
    if (!ready)
        stop(pid);
    assert_true(ready);
    int rc = agent__stacks_capture(pid, out_path, ddp_file_dir_len(out_path), 30000, 0, NULL);
    stop(pid);
    assert_int_equal(rc, 0);
    char *s = slurp(out_path);
    /* Without CAP_SYS_PTRACE (a locked-down container) gdb cannot attach: nothing to check. */
    int denied = strstr(s, "ptrace: Operation not permitted") != NULL;
    int ran = strstr(s, "--- gdb thread apply all bt\n") != NULL;
    int named = strstr(s, "spin_here_forever") != NULL;
    free(s);
    if (denied)
        skip();
    assert_true(ran);
    assert_true(named);
}

/* The forked helper writes the file and exits 0; the caller reaps it. */
static void test_helper_process(void **state) {
    (void)state;
    pid_t pid = start_sleep();
    pid_t helper = agent__stacks_start(pid, out_path, ddp_file_dir_len(out_path), 5000,
                                       AGENT_STACKS_PROC_ONLY);
    assert_true(helper > 0);
    int status = -1;
    pid_t r = 0;
    for (int waited = 0; waited < WAIT_MS && r == 0; waited += 10) {
        r = waitpid(helper, &status, WNOHANG);
        if (r == 0)
            sleep_ms(10);
    }
    if (r == 0)
        stop(helper);
    stop(pid);
    assert_int_equal(r, helper);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char *s = slurp(out_path);
    char want[64];
    snprintf(want, sizeof want, "=== process %d (sleep)", (int)pid);
    assert_non_null(strstr(s, want));
    free(s);
}

/* The summary's quote leaves gdb's attach chatter out and stops at max_lines or the buffer. */
static void test_head(void **state) {
    (void)state;
    FILE *f = fopen(out_path, "w");
    assert_non_null(f);
    fputs("# header\n=== process 7 (x) state S\n[New LWP 8]\n[Thread debugging using "
          "libthread_db enabled]\n#0  spin_here_forever ()\n#1  main ()\n",
          f);
    fclose(f);
    char out[256];
    assert_int_equal(agent__stacks_head(out_path, 3, out, sizeof out), 3);
    assert_string_equal(out, "# header\n=== process 7 (x) state S\n#0  spin_here_forever ()\n");
    assert_int_equal(agent__stacks_head(out_path, 100, out, sizeof out), 4);
    assert_int_equal(agent__stacks_head(out_path, 100, out, 12), 2);
    assert_string_equal(out, "# header\n=="); /* cut to cap - 1 bytes */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_only_sleeping),
        cmocka_unit_test(test_whole_group),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_budget_hanging_tool),
        cmocka_unit_test(test_gdb_names_function),
        cmocka_unit_test(test_helper_process),
        cmocka_unit_test(test_relative_path_entries_not_trusted),
        cmocka_unit_test(test_planted_link_not_followed),
        cmocka_unit_test(test_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
