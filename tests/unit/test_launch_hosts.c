/* SPDX-License-Identifier: Apache-2.0
 * Unit tests for launcher/hostfile.c and the ssh flags of launcher/cli.c: hostfiles in mpirun's,
 * DeepSpeed's, bare and NAME:N forms, comments and blank lines; hostile files refused by line
 * (duplicates, slots=0, absurd counts, names no host has, NUL bytes, long lines, empty files);
 * --hosts; --include/--exclude; -x and --env_policy; the flags' combinations and where each flag
 * was on argv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_hosts.h"
#include "launch_spec.h"

/* The end of a variadic argument list (a typed null pointer, unlike a bare NULL). */
#define END ((const char *)0)

/* Parses text as hostfile "hf" and expects NAME, SLOTS pairs (NULL-terminated). */
static void expect_hosts(const char *text, ...) {
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = launch_hostfile_parse("hf", text, strlen(text), &h, &e);
    if (rc != 0)
        print_error("'%s': %s\n", text, e.text);
    assert_int_equal(rc, 0);
    va_list ap;
    va_start(ap, text);
    size_t i = 0;
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        int slots = va_arg(ap, int);
        assert_true(i < h.n);
        assert_string_equal(h.v[i].name, name);
        assert_int_equal(h.v[i].slots, slots);
        i++;
    }
    va_end(ap);
    assert_int_equal(h.n, i);
    launch_hosts_free(&h);
    assert_null(h.v);
}

/* Expects text (len bytes) refused with a message containing needle. */
static void expect_refused_n(const char *text, size_t len, const char *needle) {
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    int rc = launch_hostfile_parse("hf", text, len, &h, &e);
    if (rc != DDP_EUSAGE || strstr(e.text, needle) == NULL)
        print_error("rc %d text '%s' (wanted '%s')\n", rc, e.text, needle);
    assert_int_equal(rc, DDP_EUSAGE);
    assert_non_null(strstr(e.text, needle));
    assert_null(strchr(e.text, '\n'));
    assert_null(h.v);
    assert_int_equal(h.n, 0);
}

static void expect_refused(const char *text, const char *needle) {
    expect_refused_n(text, strlen(text), needle);
}

static void test_forms(void **state) {
    (void)state;
    /* mpirun / DeepSpeed */
    expect_hosts("node1 slots=8\nnode2 slots=4\n", "node1", 8, "node2", 4, END);
    /* bare names: slots from --nproc_per_node (0 here) */
    expect_hosts("a\nb\nc", "a", 0, "b", 0, "c", 0, END);
    /* NAME:N */
    expect_hosts("a:2\nb:3\n", "a", 2, "b", 3, END);
    /* comments, blank lines, blanks around, CRLF line ends, mpirun's max_slots */
    expect_hosts("# cluster\n\n  a slots=2   # first\n\t\nb max_slots=8 slots=1\r\nc:1\r\n", "a", 2,
                 "b", 1, "c", 1, END);
    /* addresses, dots, underscores, digits first */
    expect_hosts("10.0.0.1\nnode-1.example_x\n1node", "10.0.0.1", 0, "node-1.example_x", 0, "1node",
                 0, END);
    /* the order is the file's (node ranks follow it) */
    expect_hosts("z\ny\nx", "z", 0, "y", 0, "x", 0, END);
}

static void test_hostile(void **state) {
    (void)state;
    expect_refused("", "--hostfile hf: no hosts in it");
    expect_refused("# only\n\n   \n", "--hostfile hf: no hosts in it");
    expect_refused("a\nb\na\n", "--hostfile hf:3: 'a' is listed twice (first on line 1)");
    expect_refused("a slots=0\n", "--hostfile hf:1: 'slots=0' is out of range (slots in 1..65536)");
    expect_refused("a:0\n", "hf:1: 'a:0' is out of range");
    expect_refused("a slots=99999999999\n", "hf:1: 'slots=99999999999' is out of range");
    expect_refused("a slots=-1\n", "hf:1: 'slots=-1' is out of range");
    expect_refused("a slots=x\n", "hf:1: 'slots=x' has a slot count that is not a number");
    /* A sign or a blank is not part of a count (strtoll would take both). */
    expect_refused("a slots=+2\n", "hf:1: 'slots=+2' has a slot count that is not a number");
    expect_refused("a:+2\n", "hf:1: 'a:+2' has a slot count that is not a number");
    expect_refused("a max_slots=+8\n", "hf:1: 'max_slots=+8' has a slot count that is not a");
    /* Host names ignore case, as DNS does: one machine, listed twice. */
    expect_refused("NODEA\nnodea\n", "--hostfile hf:2: 'nodea' is listed twice (first on line 1, "
                                     "as 'NODEA'; host names ignore case)");
    expect_refused("a\nNode.Example\nnode.example:2\n", "hf:3: 'node.example' is listed twice");
    expect_refused("a slots=\n", "hf:1: 'slots=' is not a host's setting");
    expect_refused("a:\n", "hf:1: 'a:' has no slot count");
    expect_refused("a:2 slots=2\n", "hf:1: 'a:2 slots=2' gives the slot count twice");
    expect_refused("a slots=2 slots=3\n", "gives the slot count twice");
    expect_refused("ok\n-oProxyCommand=touch_x\n",
                   "hf:2: '-oProxyCommand=touch_x' is not a host name (it starts with '-' or '.')");
    expect_refused("a;rm\n", "hf:1: 'a;rm' is not a host name");
    expect_refused("a$(x)\n", "is not a host name");
    expect_refused("user@host\n", "'user@host' is not a host name");
    expect_refused("a cpus=3\n", "hf:1: 'cpus=3' is not a host's setting");
    expect_refused("\n\na\xff\n", "hf:3: 'a\\xff' is not a host name");
    expect_refused_n("a\nb\0c\n", 6, "hf:2: a NUL byte");
    char longline[1100];
    memset(longline, 'a', sizeof longline - 1);
    longline[sizeof longline - 1] = '\0';
    expect_refused(longline, "hf:1: a line longer than 1024 bytes");
    char longname[300];
    memset(longname, 'b', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    expect_refused(longname, "is longer than a host name may be (253)");
}

/* A hostfile of LAUNCH_MAX_NODES hosts (the index grows many times over), then one more, then
 * a duplicate of the first host in another case as the last line. */
static void test_many(void **state) {
    (void)state;
    size_t cap = (size_t)(LAUNCH_MAX_NODES + 2) * 24;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = 0;
    for (int i = 0; i < LAUNCH_MAX_NODES; i++)
        len += (size_t)snprintf(text + len, cap - len, "node%06d slots=2\n", i);
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_parse("hf", text, len, &h, &e), 0);
    assert_int_equal(h.n, LAUNCH_MAX_NODES);
    assert_string_equal(h.v[LAUNCH_MAX_NODES - 1].name, "node065535");
    launch_hosts_free(&h);
    /* --include's names are found in the same index. */
    assert_int_equal(launch_hostfile_parse("hf", text, len, &h, &e), 0);
    assert_int_equal(launch_hosts_filter(&h, "NODE065535,node000007", NULL, &e), 0);
    assert_int_equal(h.n, 2);
    assert_string_equal(h.v[0].name, "node000007");
    launch_hosts_free(&h);
    size_t dup = len - 19; /* the last host's line, "node065535 slots=2\n", becomes the first's */
    memcpy(text + dup, "NODE000000 slots=2\n", 19);
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_parse("hf", text, len, &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hostfile hf:65536: 'NODE000000' is listed twice (first on line "
                                "1, as 'node000000'; host names ignore case)");
    memcpy(text + dup, "node065535 slots=2\n", 19);
    len += (size_t)snprintf(text + len, cap - len, "node065536\n");
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_parse("hf", text, len, &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hostfile hf:65537: more hosts than a job may have (65536)");
    free(text);
}

static void test_load(void **state) {
    (void)state;
    char path[] = "/tmp/ddprun-hostfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "h1 slots=2\nh2\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_load(path, &h, &e), 0);
    assert_int_equal(h.n, 2);
    assert_string_equal(h.v[1].name, "h2");
    launch_hosts_free(&h);
    unlink(path);
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_load(path, &h, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--hostfile: unable to open /tmp/ddprun-hostfile-"));
    ddp_err_clear(&e);
    assert_int_equal(launch_hostfile_load("/tmp", &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hostfile: /tmp is not a regular file");
}

static void test_hosts_flag(void **state) {
    (void)state;
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "node1:8,node2:8,node3", &h, &e), 0);
    assert_int_equal(h.n, 3);
    assert_string_equal(h.v[0].name, "node1");
    assert_int_equal(h.v[0].slots, 8);
    assert_int_equal(h.v[2].slots, 0);
    launch_hosts_free(&h);
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a,a", &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hosts: entry 2: 'a' is listed twice (first as entry 1)");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "b,A:2,a", &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hosts: entry 3: 'a' is listed twice (first as entry 2, as 'A'; "
                                "host names ignore case)");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a:+1", &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hosts: entry 1: 'a:+1' has a slot count that is not a number");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a,,b", &h, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--hosts: entry 2: an empty host name");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a slots=2", &h, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "is not NAME or NAME:N"));
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a:0", &h, &e), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--hosts: entry 1: 'a:0' is out of range"));
}

/* Filters a fresh a,b,c,d list and expects the names left (a string like "a,c") or an error. */
static void expect_filter(const char *inc, const char *exc, const char *left, const char *error) {
    launch_hosts_t h;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_parse("--hosts", "a:1,b:2,c:3,d:4", &h, &e), 0);
    int rc = launch_hosts_filter(&h, inc, exc, &e);
    if (error != NULL) {
        if (rc != DDP_EUSAGE || strcmp(e.text, error) != 0)
            print_error("rc %d text '%s' (wanted '%s')\n", rc, e.text, error);
        assert_int_equal(rc, DDP_EUSAGE);
        assert_string_equal(e.text, error);
        assert_int_equal(h.n, 4); /* unchanged */
    } else {
        assert_int_equal(rc, 0);
        char got[64] = "";
        for (size_t i = 0; i < h.n; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? "," : "",
                     h.v[i].name);
        assert_string_equal(got, left);
    }
    launch_hosts_free(&h);
}

static void test_filters(void **state) {
    (void)state;
    expect_filter(NULL, NULL, "a,b,c,d", NULL);
    expect_filter("c,a", NULL, "a,c", NULL); /* the list's order, not the filter's */
    expect_filter("b@d", NULL, "b,d", NULL); /* DeepSpeed's separator */
    expect_filter(NULL, "c", "a,b,d", NULL);
    expect_filter(NULL, "a,b,c", "d", NULL);
    expect_filter("C,B", NULL, "b,c", NULL); /* host names ignore case */
    expect_filter(NULL, "A", "b,c,d", NULL);
    expect_filter(NULL, "a,b,c,d", NULL, "--exclude leaves no host to run on");
    expect_filter("x", NULL, NULL, "--include: 'x' is not one of the job's hosts");
    expect_filter(NULL, "a,zz", NULL, "--exclude: 'zz' is not one of the job's hosts");
    expect_filter("a", "b", NULL, "--include and --exclude cannot be used together");
    expect_filter("a:0,1", NULL, NULL,
                  "--include: 'a:0,1' selects slots of a host (NAME:SLOTS), which ddprun does "
                  "not support; name whole hosts");
}

static char *argv_buf[32];

static int parse(launch_spec_t *s, ddp_err_t *e, ...) {
    va_list ap;
    va_start(ap, e);
    int argc = 0;
    argv_buf[argc++] = "ddprun";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
        argv_buf[argc++] = (char *)a;
    argv_buf[argc] = NULL;
    va_end(ap);
    ddp_err_clear(e);
    return launch_cli_parse_env(argc, argv_buf, NULL, NULL, s, e);
}

/* --nnodes against the host count: n, MIN:MAX around it, or left out. */
static void test_nnodes(void **state) {
    (void)state;
    ddp_err_t e;
    int lo = -1, hi = -1;
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 0, 1, 1, &lo, &hi, &e), 0);
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 3);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 1, 3, 3, &lo, &hi, &e), 0);
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 3);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 1, 2, 3, &lo, &hi, &e), 0);
    assert_int_equal(lo, 2);
    assert_int_equal(hi, 3);
    /* Fewer hosts than MAX: the agents are told the count, as no other agent can join. */
    assert_int_equal(launch_hosts_nnodes(3, "--hosts", 1, 1, 8, &lo, &hi, &e), 0);
    assert_int_equal(lo, 1);
    assert_int_equal(hi, 3);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 1, 3, 5, &lo, &hi, &e), 0);
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 3);

    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 1, 2, 2, &lo, &hi, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--nnodes: --hostfile gives 3 host(s) and each runs one agent; "
                                "--nnodes must be 3, MIN:MAX around it, or left out");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_nnodes(3, "--hostfile", 1, 4, 6, &lo, &hi, &e), DDP_EUSAGE);
    assert_string_equal(e.text, "--nnodes: 4:6 needs at least 4 hosts and --hostfile gives 3");
    ddp_err_clear(&e);
    assert_int_equal(launch_hosts_nnodes(3, "--hosts", 1, 1, 2, &lo, &hi, &e), DDP_EUSAGE);
    assert_string_equal(e.text,
                        "--nnodes: 1:2 allows at most 2 hosts and --hosts gives 3 (--exclude "
                        "drops hosts)");
}

static void test_cli(void **state) {
    (void)state;
    launch_spec_t s;
    ddp_err_t e;
    assert_int_equal(parse(&s, &e, "--hostfile", "hf", "--exclude=b", "--ssh", "ssh -p 2222",
                           "--remote_ddprun=/opt/ddprun", "--ssh-fanout=4", "-v", "--max_restarts",
                           "3", "./train", "--epochs", "5", END),
                     0);
    assert_string_equal(s.hostfile, "hf");
    assert_string_equal(s.exclude, "b");
    assert_string_equal(s.ssh, "ssh -p 2222");
    assert_string_equal(s.remote_ddprun, "/opt/ddprun");
    assert_int_equal(s.ssh_fanout, 4);
    /* Where each flag was: what the hosts are given again. */
    assert_int_equal(s.n_args, 7);
    assert_int_equal(s.arg_id[0], LAUNCH_OPT_HOSTFILE);
    assert_int_equal(s.arg_first[0], 1);
    assert_int_equal(s.arg_count[0], 2);
    assert_int_equal(s.arg_id[1], LAUNCH_OPT_EXCLUDE);
    assert_int_equal(s.arg_count[1], 1);
    assert_int_equal(s.arg_id[5], LAUNCH_OPT_VERBOSE);
    assert_int_equal(s.arg_id[6], LAUNCH_OPT_MAX_RESTARTS);
    assert_int_equal(s.arg_first[6], 9);
    assert_int_equal(s.arg_count[6], 2);
    assert_int_equal(s.prog_argc, 3);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--hosts", "a:1,b:2", "x", END), 0);
    assert_int_equal(s.ssh_fanout, LAUNCH_DEFAULT_SSH_FANOUT);
    launch_spec_free(&s);

    assert_int_equal(parse(&s, &e, "--hostfile", "f", "--hosts", "a", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--hostfile and --hosts cannot be used together");
    assert_int_equal(parse(&s, &e, "--include", "a", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--include filters the hosts of --hostfile or --hosts");
    assert_int_equal(parse(&s, &e, "--remote_ddprun", "/x", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--remote_ddprun", "bin/ddprun", "x", END),
                     DDP_EUSAGE);
    assert_string_equal(e.text, "--remote_ddprun: 'bin/ddprun' is not an absolute path");
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--node_rank", "0", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--node_rank: with --hostfile or --hosts"));
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--standalone", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--ssh", "  ", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--ssh: empty value");
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--ssh_fanout", "0", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--ssh_session", "a", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--ssh_session", "a;b", "x", END), DDP_EUSAGE);
    assert_non_null(strstr(e.text, "--ssh_session"));
    /* -x VAR / -x VAR=VAL, repeatable and in order; names checked; the token's refused. */
    assert_int_equal(
        parse(&s, &e, "--hosts", "a", "-x", "FOO", "-xBAR=1 2", "--env=B_2=", "x", END), 0);
    assert_int_equal(s.n_env, 3);
    assert_string_equal(s.env[0], "FOO");
    assert_string_equal(s.env[1], "BAR=1 2");
    assert_string_equal(s.env[2], "B_2=");
    assert_null(s.env[3]);
    assert_int_equal(s.env_policy_none, 0);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "-x", "1X", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "-x: '1X' is not VAR or VAR=VALUE");
    assert_int_equal(parse(&s, &e, "--hosts", "a", "-x", "A-B=1", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "-x", "=1", "x", END), DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "-x", "DDPRUN_TOKEN_FILE=/t", "x", END),
                     DDP_EUSAGE);
    assert_non_null(strstr(e.text, "DDPRUN_TOKEN_FILE is the job token's"));
    assert_int_equal(parse(&s, &e, "--hosts", "a", "-x", "DDPRUN_STORE_TOKEN", "x", END),
                     DDP_EUSAGE);
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--env_policy", "all", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "--env_policy: 'all' is not default or none");
    assert_int_equal(parse(&s, &e, "--hosts", "a", "--env_policy", "none", "x", END), 0);
    assert_int_equal(s.env_policy_none, 1);
    launch_spec_free(&s);
    assert_int_equal(parse(&s, &e, "-x", "A=1", "x", END), DDP_EUSAGE);
    assert_string_equal(e.text, "-x and --env_policy are for the hosts of --hostfile or --hosts");
    assert_int_equal(parse(&s, &e, "--ssh_session", "node-1", "x", END), 0);
    assert_string_equal(s.ssh_session, "node-1");
    launch_spec_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),   cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_load),    cmocka_unit_test(test_hosts_flag),
        cmocka_unit_test(test_filters), cmocka_unit_test(test_cli),
        cmocka_unit_test(test_nnodes),  cmocka_unit_test(test_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
