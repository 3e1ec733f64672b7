/* SPDX-License-Identifier: Apache-2.0
 * fake_worker: a worker whose behaviour the integration tests choose through FW_* variables
 * (tini's sigconf-test, libuv's spawn_helper). Everything it does is bounded by FW_SLEEP_MS or
 * by the test's own timeout.
 *
 *   FW_RANK=r            apply FW_EXIT / FW_SIGNAL / FW_ERROR only on rank r (others sleep)
 *   FW_FAIL_ATTEMPTS=k   fail only while TORCHELASTIC_RESTART_COUNT < k
 *   FW_EXIT=n            exit with n after FW_DELAY_MS
 *   FW_SIGNAL=n          raise signal n after FW_DELAY_MS
 *   FW_ERROR=msg         write TORCHELASTIC_ERROR_FILE (PyTorch format) before failing
 *   FW_ERROR_PAD=bytes   make that file's traceback that many bytes longer
 *   FW_DELAY_MS=ms       before failing (default 0)
 *   FW_SLEEP_MS=ms       how long the other ranks (or all, without a failure) run; default 0
 *   FW_QUICK_RANK=r      rank r exits 0 at once (the others keep running)
 *   FW_IGNORE_TERM=1     ignore SIGTERM
 *   FW_TERM_EXIT=n       on SIGTERM, exit n (default: die by SIGTERM)
 *   FW_CHILD=1           fork a grandchild that sleeps FW_SLEEP_MS (tests orphan handling)
 *   FW_DAEMON=1          start a daemon the classic way (fork, setsid, fork; the middle process
 *                        exits) that sleeps FW_SLEEP_MS (60 s if unset) and records its pid in
 *                        FW_DIR/daemon.<rank>.<attempt>: it is in no process group of the job
 *   FW_DIR=dir           write dir/pid.<rank>.<attempt>, dir/env.<rank>.<attempt>,
 *                        dir/argv.<rank>.<attempt> (one argument per line, argv[0] first), and
 *                        dir/sig.<rank>.<attempt> with the names of signals received;
 *                        t.<rank>.<attempt> holds CLOCK_MONOTONIC ns at start and, for a failing
 *                        rank, tfail.<rank>.<attempt> the time just before it fails. <attempt>
 *                        is DDPRUN_ROUND (the rendezvous round; the restart count on one node)
 *   FW_LINES=n           print n lines "line <i> from rank <r>" on stdout (and stderr with
 *                        FW_STDERR=1), FW_LINE_LEN=bytes makes each line that long */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static char sig_path[4096];

static long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Writes dir/<name>.<rank>.<attempt> containing the monotonic time now. */
static void stamp(const char *dir, const char *name, int rank, int attempt) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.%d.%d", dir, name, rank, attempt);
    FILE *f = fopen(p, "w");
    if (f) {
        fprintf(f, "%lld\n", mono_ns());
        fclose(f);
    }
}

static void on_signal(int sig) {
    if (sig_path[0]) {
        int fd = open(sig_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            const char *name = sigabbrev_np(sig);
            ssize_t w = write(fd, name, strlen(name));
            w = write(fd, "\n", 1);
            (void)w;
            close(fd);
        }
    }
    if (sig == SIGTERM) {
        int code = env_int("FW_TERM_EXIT", -1);
        if (code >= 0)
            _exit(code);
        signal(SIGTERM, SIG_DFL);
        raise(SIGTERM);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* FW_DAEMON: a grandchild in a session of its own whose parent has exited. Returns in the
 * worker once the daemon has recorded its pid (or failed to start). */
static void daemonize(const char *dir, int rank, int round, int sleep) {
    int ready[2];
    if (pipe(ready) < 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        close(ready[0]);
        setsid();
        if (fork() == 0) {
            if (dir) {
                char p[4096];
                snprintf(p, sizeof p, "%s/daemon.%d.%d", dir, rank, round);
                FILE *f = fopen(p, "w");
                if (f) {
                    fprintf(f, "%d\n", (int)getpid());
                    fclose(f);
                }
            }
            close(ready[1]);
            sleep_ms(sleep);
            _exit(0);
        }
        _exit(0);
    }
    close(ready[1]);
    char b;
    while (c > 0 && read(ready[0], &b, 1) < 0 && errno == EINTR)
        ;
    close(ready[0]);
}

int main(int argc, char **argv) {
    int rank = env_int("RANK", 0);
    int attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
    /* Files are named by round: on several nodes a membership change starts a new round
     * without counting a restart. */
    int round = env_int("DDPRUN_ROUND", attempt);
    const char *dir = getenv("FW_DIR");
    if (dir)
        stamp(dir, "t", rank, round);
    if (dir) {
        char p[4096];
        snprintf(p, sizeof p, "%s/pid.%d.%d", dir, rank, round);
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
        snprintf(p, sizeof p, "%s/env.%d.%d", dir, rank, round);
        f = fopen(p, "w");
        if (f) {
            for (char **e = environ; *e; e++)
                fprintf(f, "%s\n", *e);
            fclose(f);
        }
        snprintf(p, sizeof p, "%s/argv.%d.%d", dir, rank, round);
        f = fopen(p, "w");
        if (f) {
            for (int i = 0; i < argc; i++)
                fprintf(f, "%s\n", argv[i]);
            fclose(f);
        }
        snprintf(sig_path, sizeof sig_path, "%s/sig.%d.%d", dir, rank, round);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (env_int("FW_IGNORE_TERM", 0)) {
        signal(SIGTERM, SIG_IGN);
    } else if (dir || getenv("FW_TERM_EXIT")) {
        sigaction(SIGTERM, &sa, NULL);
    }

    int lines = env_int("FW_LINES", 0);
    int len = env_int("FW_LINE_LEN", 0);
    int to_err = env_int("FW_STDERR", 0);
    for (int i = 0; i < lines; i++) {
        char buf[1 << 16];
        int n = snprintf(buf, sizeof buf, "line %d from rank %d", i, rank);
        while (n < len && n < (int)sizeof buf - 2)
            buf[n++] = 'x';
        buf[n++] = '\n';
        /* Several small writes per line: the agent must still deliver whole lines. */
        for (int off = 0; off < n; off += 7) {
            int k = n - off < 7 ? n - off : 7;
            ssize_t w = write(to_err ? 2 : 1, buf + off, (size_t)k);
            (void)w;
        }
    }

    int sleep = env_int("FW_SLEEP_MS", 0);
    if (env_int("FW_CHILD", 0)) {
        pid_t c = fork();
        if (c == 0) {
            sleep_ms(sleep > 0 ? sleep : 60000);
            _exit(0);
        }
    }
    if (env_int("FW_DAEMON", 0))
        daemonize(dir, rank, round, sleep > 0 ? sleep : 60000);
    int target = env_int("FW_RANK", -1);
    int fail_attempts = env_int("FW_FAIL_ATTEMPTS", 1 << 30);
    int fails = (target < 0 || target == rank) && attempt < fail_attempts &&
                (getenv("FW_EXIT") || getenv("FW_SIGNAL"));
    if (fails) {
        sleep_ms(env_int("FW_DELAY_MS", 0));
        if (dir)
            stamp(dir, "tfail", rank, round);
        const char *msg = getenv("FW_ERROR");
        const char *ef = getenv("TORCHELASTIC_ERROR_FILE");
        if (msg && ef) {
            FILE *f = fopen(ef, "w");
            if (f) {
                fprintf(f,
                        "{\"message\": {\"message\": \"RuntimeError: %s\", \"extraInfo\": "
                        "{\"py_callstack\": \"Traceback (most recent call last):\\n  File "
                        "\\\"train.py\\\", line 1\\n",
                        msg);
                for (long pad = env_int("FW_ERROR_PAD", 0); pad > 0; pad -= 64)
                    fputs("  File \\\"deep.py\\\", line 2, in recurse ................\\n", f);
                fprintf(f, "RuntimeError: %s\\n\", \"timestamp\": \"%ld\"}}}\n", msg,
                        (long)time(NULL));
                fclose(f);
            }
        }
        if (getenv("FW_SIGNAL")) {
            int sig = env_int("FW_SIGNAL", SIGKILL);
            signal(sig, SIG_DFL);
            raise(sig);
        }
        return env_int("FW_EXIT", 1);
    }
    if (env_int("FW_QUICK_RANK", -1) == rank)
        return 0;
    sleep_ms(sleep);
    return 0;
}
