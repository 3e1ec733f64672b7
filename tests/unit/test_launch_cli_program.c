/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/program.c: the worker argv (.py, -m, --no_python, --run_path, missing
 * programs and interpreters) and the program's name in the summary's title. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_cli_fixture.h"
#include "launch_int.h"
#include "launch_spec.h"
#include "rdzv_proto.h"

/* ---- launch_program_argv ------------------------------------------------------------------- */

static char tmpdir[64];

static char bindir[96];

static char oldcwd[4096];

static void write_file(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
}

static int prog_setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ddprun-test-XXXXXX");
    if (mkdtemp(tmpdir) == NULL || getcwd(oldcwd, sizeof oldcwd) == NULL)
        return -1;
    snprintf(bindir, sizeof bindir, "%s/bin", tmpdir);
    mkdir(bindir, 0755);
    char p[160];
    snprintf(p, sizeof p, "%s/python3", bindir);
    write_file(p, "#!/bin/sh\n", 0755);
    snprintf(p, sizeof p, "%s/noexec", bindir);
    write_file(p, "#!/bin/sh\n", 0644);
    if (chdir(tmpdir) != 0)
        return -1;
    write_file("train.py", "print(1)\n", 0644);
    write_file("exec.py", "#!/bin/sh\n", 0755);
    write_file("script", "#!/bin/sh\n", 0644);
    write_file("tool", "#!/bin/sh\n", 0755);
    write_file("data.txt", "x\n", 0644);
    mkdir("adir", 0755);
    char path[256];
    snprintf(path, sizeof path, "%s:/usr/bin:/bin", bindir);
    setenv("PATH", path, 1);
    unsetenv("PYTHON_EXEC");
    return 0;
}

static int prog_teardown(void **state) {
    (void)state;
    if (chdir(oldcwd) != 0)
        return -1;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Builds the worker argv for the given ddprun arguments; returns the launch_program_argv code. */
static int build(launch_argv_t *out, ddp_err_t *e, ...) {
    launch_spec_t s;
    va_list ap;
    va_start(ap, e);
    int rc = parse_v(&s, e, NULL, ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    rc = launch_program_argv(&s, out, e);
    launch_spec_free(&s);
    return rc;
}

static void expect_argv(const launch_argv_t *a, const char *path_suffix, ...) {
    va_list ap;
    va_start(ap, path_suffix);
    int i = 0;
    const char *want;
    while ((want = va_arg(ap, const char *)) != NULL) {
        assert_true(i < a->argc);
        assert_string_equal(a->argv[i], want);
        i++;
    }
    va_end(ap);
    assert_int_equal(a->argc, i);
    assert_null(a->argv[i]);
    size_t n = strlen(a->path), m = strlen(path_suffix);
    assert_true(n >= m);
    assert_string_equal(a->path + n - m, path_suffix);
}

static void test_argv_python(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "--nproc_per_node=2", "train.py", "--lr", "1", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "train.py", "--lr", "1", END);
    assert_true(a.path[0] == '/');
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "-m", "pkg.train", "x", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "-m", "pkg.train", "x", END);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--run_path", "script", "y", END), 0);
    expect_argv(&a, "/bin/python3", "python3", "-u", "script", "y", END);
    launch_argv_free(&a);
    setenv("PYTHON_EXEC", "/bin/sh", 1);
    assert_int_equal(build(&a, &e, "train.py", END), 0);
    expect_argv(&a, "/bin/sh", "/bin/sh", "-u", "train.py", END);
    launch_argv_free(&a);
    setenv("PYTHON_EXEC", "python-missing-xyz", 1);
    assert_int_equal(build(&a, &e, "train.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "python interpreter 'python-missing-xyz' not found");
    unsetenv("PYTHON_EXEC");
}

/* The summary's title for the given ddprun arguments. */
static void expect_name(const char *want, ...) {
    launch_spec_t s;
    ddp_err_t e;
    va_list ap;
    va_start(ap, want);
    int rc = parse_v(&s, &e, NULL, ap);
    va_end(ap);
    assert_int_equal(rc, 0);
    if (strcmp(launch_program_name(&s), want) != 0)
        print_error("name '%s', want '%s'\n", launch_program_name(&s), want);
    assert_string_equal(launch_program_name(&s), want);
    launch_spec_free(&s);
}

/* A Python worker is named by its script or module, whoever starts the interpreter. */
static void test_program_name(void **state) {
    (void)state;
    expect_name("train.py", "train.py", "--lr", "1", END);
    expect_name("pkg.train", "-m", "pkg.train", END);
    expect_name("train.py", "/opt/venv/bin/python", "train.py", "--lr", "1", END);
    expect_name("train.py", "--no_python", "python3", "-u", "train.py", END);
    expect_name("pkg.train", "--no_python", "python3.12", "-u", "-m", "pkg.train", "x", END);
    expect_name("pkg.train", "python3", "-mpkg.train", END);
    expect_name("pkg.train", "python3", "-uBm", "pkg.train", END);
    expect_name("t.py", "python3.13t", "-W", "ignore", "-X", "dev", "-Wd", "t.py", END);
    expect_name("t.py", "pypy3", "--check-hash-based-pycs", "never", "t.py", END);
    expect_name("-odd.py", "python", "--", "-odd.py", END);
    /* Nothing to name: the program stands. */
    expect_name("python3", "python3", "-c", "import os", END);
    expect_name("python3", "python3", "-", END);
    expect_name("python3", "python3", END);
    expect_name("python3", "python3", "--version", END);
    expect_name("./tool", "./tool", "train.py", END);
    expect_name("pythonic", "pythonic", "train.py", END);
    expect_name("/usr/bin/env", "/usr/bin/env", "python3", "t.py", END);
}

static void test_argv_direct(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "./tool", "a", END), 0);
    expect_argv(&a, "./tool", "./tool", "a", END);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "true", END), 0); /* bare name: searched in PATH */
    expect_argv(&a, "/bin/true", "true", END);
    assert_true(a.path[0] == '/');
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--no_python", "./exec.py", "z", END), 0);
    expect_argv(&a, "./exec.py", "./exec.py", "z", END);
    launch_argv_free(&a);
}

static void test_argv_missing(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    assert_int_equal(build(&a, &e, "./trian", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './trian' not found");
    assert_null(a.argv);
    assert_int_equal(build(&a, &e, "no-such-program-xyz", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'no-such-program-xyz' not found");
    assert_int_equal(build(&a, &e, "tool", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "not found in PATH (use ./tool"));
    assert_int_equal(build(&a, &e, "noexec", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'noexec' found in PATH but not executable");
    assert_int_equal(build(&a, &e, "./data.txt", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './data.txt' is not executable");
    assert_int_equal(build(&a, &e, "./adir", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './adir' is a directory");
    assert_int_equal(build(&a, &e, "missing.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'missing.py' not found");
    assert_int_equal(build(&a, &e, "--no_python", "train.py", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program 'train.py' not found in PATH (use ./train.py for the "
                                "file here)");
}

/* A script whose #! interpreter is missing would fail at exec with ENOENT as if the script were
 * missing: the interpreter is named before anything starts. */
static void test_argv_interpreter(void **state) {
    (void)state;
    launch_argv_t a;
    ddp_err_t e;
    write_file("nointerp", "#!/nonexistent/python9 -u\nprint(1)\n", 0755);
    write_file("crlf", "#!/bin/sh\r\necho hi\r\n", 0755);
    write_file("empty", "#!  \n", 0755);
    write_file("dirinterp", "#!/tmp\n", 0755);
    assert_int_equal(build(&a, &e, "./nointerp", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './nointerp': its interpreter '/nonexistent/python9' (#! "
                                "line) not found");
    assert_int_equal(build(&a, &e, "./crlf", END), DDP_EUSAGE);
    assert_string_equal(e.text, "program './crlf': its interpreter '/bin/sh\\r' (#! line) not "
                                "found");
    assert_int_equal(build(&a, &e, "./empty", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "has a #! line without an interpreter"));
    assert_int_equal(build(&a, &e, "./dirinterp", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "'/tmp' (#! line) is not executable"));
    /* A working script and a binary pass. */
    assert_int_equal(build(&a, &e, "./tool", END), 0);
    launch_argv_free(&a);
    assert_int_equal(build(&a, &e, "--no_python", "/bin/true", END), 0);
    launch_argv_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program_name),
        cmocka_unit_test_setup_teardown(test_argv_python, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_direct, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_missing, prog_setup, prog_teardown),
        cmocka_unit_test_setup_teardown(test_argv_interpreter, prog_setup, prog_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
