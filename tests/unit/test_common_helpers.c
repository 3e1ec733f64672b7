/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for common/: signal names both ways (ddp_signal), the visible-device list rule
 * (ddp_devices: torch.cuda's reading of CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES), and the
 * self-connected TCP socket check (ddp_net), on loopback, and durations written back as seconds
 * (ddp_seconds_text); the /proc/<pid>/stat reader (ddp_proc); the error codes' texts
 * (ddp_strerror). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_devices.h"
#include "ddp_err.h"
#include "ddp_net.h"
#include "ddp_parse.h"
#include "ddp_proc.h"
#include "ddp_signal.h"

static void test_signal_parse(void **state) {
    (void)state;
    assert_int_equal(ddp_signal_parse("SIGTERM"), SIGTERM);
    assert_int_equal(ddp_signal_parse("term"), SIGTERM);
    assert_int_equal(ddp_signal_parse("sigusr1"), SIGUSR1);
    assert_int_equal(ddp_signal_parse("USR2"), SIGUSR2);
    assert_int_equal(ddp_signal_parse("15"), 15);
    assert_int_equal(ddp_signal_parse("12"), 12);
    assert_int_equal(ddp_signal_parse("64"), 64);
    assert_int_equal(ddp_signal_parse("IOT"), SIGABRT); /* an alias */
    assert_int_equal(ddp_signal_parse("0"), 0);
    assert_int_equal(ddp_signal_parse("65"), 0);
    assert_int_equal(ddp_signal_parse("SIG"), 0);
    assert_int_equal(ddp_signal_parse("TERMX"), 0);
    assert_int_equal(ddp_signal_parse(""), 0);
}

static void test_signal_name(void **state) {
    (void)state;
    assert_string_equal(ddp_signal_name(SIGTERM), "SIGTERM");
    assert_string_equal(ddp_signal_name(SIGKILL), "SIGKILL");
    assert_string_equal(ddp_signal_name(SIGABRT), "SIGABRT");
    assert_string_equal(ddp_signal_name(SIGIO), "SIGIO");
    assert_string_equal(ddp_signal_name(0), "SIG?");
    assert_string_equal(ddp_signal_name(-1), "SIG?");
    assert_string_equal(ddp_signal_name(40), "SIG?");
    assert_string_equal(ddp_signal_name(1000), "SIG?");
    /* Every name reads back as its number. */
    for (int s = 1; s < 32; s++)
        if (strcmp(ddp_signal_name(s), "SIG?") != 0)
            assert_int_equal(ddp_signal_parse(ddp_signal_name(s)), s);
}

static void test_devices_select(void **state) {
    (void)state;
    const char *var = NULL;
    assert_null(ddp_devices_select(NULL, NULL, &var));
    assert_string_equal(var, "CUDA_VISIBLE_DEVICES");
    assert_string_equal(ddp_devices_select(NULL, "0,1", &var), "0,1");
    assert_string_equal(var, "CUDA_VISIBLE_DEVICES");
    assert_string_equal(ddp_devices_select("1", "0,1,2", &var), "1");
    assert_string_equal(var, "HIP_VISIBLE_DEVICES");
    /* An empty HIP list is not the one in use. */
    assert_string_equal(ddp_devices_select("", "0,1", &var), "0,1");
    assert_string_equal(var, "CUDA_VISIBLE_DEVICES");
}

static void test_devices_count(void **state) {
    (void)state;
    assert_int_equal(ddp_devices_count(NULL), -1); /* unset: no restriction */
    assert_int_equal(ddp_devices_count(""), 0);
    assert_int_equal(ddp_devices_count("NoDevFiles"), 0); /* Slurm's step without GPUs */
    assert_int_equal(ddp_devices_count("0"), 1);
    assert_int_equal(ddp_devices_count("0,1,2"), 3);
    assert_int_equal(ddp_devices_count("5, 7"), 2);
    assert_int_equal(ddp_devices_count(" 4 ,\t6 "), 2);
    assert_int_equal(ddp_devices_count("1gpu2,2"), 2);  /* strtoul: "1gpu2" is 1 */
    assert_int_equal(ddp_devices_count("0,1,-1,2"), 2); /* a negative entry ends the list */
    assert_int_equal(ddp_devices_count("0,,1"), 1);     /* so does an empty one */
    assert_int_equal(ddp_devices_count("0,1,"), 2);
    assert_int_equal(ddp_devices_count("0,0"), 0); /* a repeat empties it */
    assert_int_equal(ddp_devices_count("1,01"), 0);
    assert_int_equal(ddp_devices_count("GPU-aa,GPU-bb"), 2);
    assert_int_equal(ddp_devices_count("GPU-aa,0,GPU-bb"), 1);
    assert_int_equal(ddp_devices_count("MIG-x,MIG-y,MIG-x"), 0);
    assert_int_equal(ddp_devices_count("MIG-x,GPU-y"), 1);
    assert_int_equal(ddp_devices_count("0,GPU-aa"), 1);
}

static void test_devices_entry(void **state) {
    (void)state;
    char out[32];
    assert_int_equal(ddp_devices_entry("5, 7", 0, out, sizeof out), 0);
    assert_string_equal(out, "5");
    assert_int_equal(ddp_devices_entry("5, 7", 1, out, sizeof out), 0);
    assert_string_equal(out, "7");
    assert_int_equal(ddp_devices_entry("5, 7", 2, out, sizeof out), -ENOENT);
    assert_string_equal(out, "");
    assert_int_equal(ddp_devices_entry("GPU-abcdef, GPU-123", 1, out, sizeof out), 0);
    assert_string_equal(out, "GPU-123");
    assert_int_equal(ddp_devices_entry("GPU-abcdef", 0, out, 6), 0); /* cut to the buffer */
    assert_string_equal(out, "GPU-a");
    assert_int_equal(ddp_devices_entry("0,-1,2", 2, out, sizeof out), -ENOENT);
    assert_int_equal(ddp_devices_entry("", 0, out, sizeof out), -ENOENT);
    assert_int_equal(ddp_devices_entry(NULL, 0, out, sizeof out), -ENOENT);
    assert_int_equal(ddp_devices_entry("0,1", -1, out, sizeof out), -ENOENT);
}

/* A loopback socket bound to port P and connected to 127.0.0.1:P, where nothing listens, is
 * connected to itself (TCP simultaneous open); a real client of a listener is not. */
/* Durations in messages read as their flags take them: no exponent, no trailing zeros. */
/* Every DDP_E* code has a text of its own; -errno is strerror's; others are unknown. */
static void test_strerror(void **state) {
    (void)state;
    assert_string_equal(ddp_strerror(DDP_EFENCED), "fenced out: no longer the leader");
    assert_string_equal(ddp_strerror(DDP_ECLOSED), "connection closed by peer");
    assert_string_equal(ddp_strerror(-ENOENT), strerror(ENOENT));
    assert_string_equal(ddp_strerror(-5000), "unknown error");
    assert_string_equal(ddp_strerror(DDP_ERDZV_MOVED), "the rendezvous is served by another store");
    for (int c = DDP_EFRAME; c >= DDP_ERDZV_MOVED; c--)
        assert_string_not_equal(ddp_strerror(c), "unknown error");
}

static void test_seconds_text(void **state) {
    (void)state;
    char b[32];
    assert_string_equal(ddp_seconds_text(50000, b, sizeof b), "50");
    assert_string_equal(ddp_seconds_text(2000000000, b, sizeof b), "2000000");
    assert_string_equal(ddp_seconds_text(500, b, sizeof b), "0.5");
    assert_string_equal(ddp_seconds_text(1250, b, sizeof b), "1.25");
    assert_string_equal(ddp_seconds_text(1, b, sizeof b), "0.001");
    assert_string_equal(ddp_seconds_text(0, b, sizeof b), "0");
    assert_string_equal(ddp_seconds_text(-1500, b, sizeof b), "-1.5");
    assert_string_equal(ddp_seconds_text(INT64_MIN, b, sizeof b), "-9223372036854775.808");
}

static void test_tcp_self_connected(void **state) {
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(ddp_tcp_is_self_connected(fd), 1);
    close(fd);

    struct sockaddr_in l = {.sin_family = AF_INET};
    l.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t ll = sizeof l;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&l, sizeof l), 0);
    assert_int_equal(listen(lfd, 1), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&l, &ll), 0);
    int cfd = ddp_tcp_connect((struct sockaddr *)&l, ll, UINT64_MAX, 0);
    assert_true(cfd >= 0);
    assert_int_equal(ddp_tcp_is_self_connected(cfd), 0);
    assert_int_equal(ddp_tcp_is_self_connected(lfd), 0); /* not connected at all */
    close(cfd);
    close(lfd);
}

/* The stat line's parser: a comm holding spaces and parentheses ends at the last ')'; lines
 * without the three fields after it are refused. And the reader, on live processes: this one,
 * a zombie child, one that is gone. */
static void test_proc_stat(void **state) {
    (void)state;
    ddp_proc_stat_t st;
    assert_int_equal(ddp_proc_stat_parse("42 (a b) c) (x) S 1 40 40 0 -1", &st), 0);
    assert_string_equal(st.comm, "a b) c) (x");
    assert_int_equal(st.state, 'S');
    assert_int_equal(st.ppid, 1);
    assert_int_equal(st.pgrp, 40);
    static const char *const bad[] = {"",
                                      "42 comm S 1 2",
                                      "42 (comm S 1 2",
                                      "42 comm) S 1 2",
                                      "42 (comm) S 1",
                                      "42 )comm( S 1 2",
                                      "42 (comm) S x 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ddp_proc_stat_parse(bad[i], &st) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
    assert_int_equal(ddp_proc_stat(getpid(), 0, &st), 0);
    assert_int_equal(st.state, 'R');
    assert_int_equal(st.ppid, getppid());
    assert_int_equal(st.pgrp, getpgrp());
    assert_int_equal(ddp_proc_stat(getpid(), getpid(), &st), 0); /* the main thread */
    assert_int_equal(st.pgrp, getpgrp());
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    /* Not reaped yet: a zombie, once it has exited (bounded: 5 s). */
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(ddp_proc_stat(child, 0, &st), 0);
        if (st.state == 'Z')
            break;
        usleep(1000);
    }
    assert_int_equal(st.state, 'Z');
    assert_int_equal(st.ppid, getpid());
    assert_int_equal(waitpid(child, NULL, 0), child);
    assert_int_equal(ddp_proc_stat(child, 0, &st), -ENOENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_parse),   cmocka_unit_test(test_signal_name),
        cmocka_unit_test(test_devices_select), cmocka_unit_test(test_devices_count),
        cmocka_unit_test(test_devices_entry),  cmocka_unit_test(test_tcp_self_connected),
        cmocka_unit_test(test_seconds_text),   cmocka_unit_test(test_proc_stat),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
