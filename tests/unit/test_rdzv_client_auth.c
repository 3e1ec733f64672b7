/* SPDX-License-Identifier: Apache-2.0
 * Tokens and the handshake, the blocking client against a store in the same process
 * (store_client_fixture.h): a client with a token refuses a store without one, a run token
 * reaches its run's keys alone, authenticated clients meet at a barrier (helper threads), and
 * every token error names its source and hides the value. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp_buf.h"
#include "ddp_err.h"
#include "rdzv_client.h"
#include "store_client_fixture.h"

typedef struct barrier_arg {
    uint16_t port;
    int rc;
} barrier_arg_t;

static void *barrier_rank(void *p) {
    barrier_arg_t *a = p;
    rdzv_client_t *c = must_connect(a->port, good_token, strlen(good_token));
    ddp_err_t err;
    ddp_err_clear(&err);
    a->rc = rdzv_client_barrier(c, "r3/bar", 8, 5000, &err);
    rdzv_client_free(c);
    return NULL;
}

/* A client that holds a token refuses a store without one: such a store cannot prove it is the
 * job's, and whoever answered first on the endpoint would run the rendezvous. The error names the
 * endpoint; a client without a token is served as before. */
static void test_token_refuses_unauthenticated_store(void **state) {
    (void)state;
    server_thread_t *st = server_up(NULL, 0, 0, 0);
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    assert_int_equal(connect_to(st->port, good_token, strlen(good_token), &c, &err),
                     DDP_EAUTH_PEER);
    assert_null(c);
    char peer[32];
    snprintf(peer, sizeof peer, "127.0.0.1:%u: ", (unsigned)st->port);
    assert_int_equal(strncmp(err.text, peer, strlen(peer)), 0);
    assert_non_null(strstr(err.text, "the store has no token (--no-auth)"));
    assert_null(strchr(err.text, '\n'));
    c = must_connect(st->port, NULL, 0);
    assert_int_equal(rdzv_client_authenticated(c), 0);
    rdzv_client_free(c);
    server_down(st);
}

/* A run token (rdzv_run_token) authenticates for its run alone, and reaches the keys
 * <prefix>/<run>/... alone: any other key, a key-less listing, and the store's token or another
 * run's token in its place are refused. The store's token, naming any run, reaches everything. */
static void test_run_token_scope(void **state) {
    (void)state;
    server_thread_t *st = server_up(good_token, strlen(good_token), 0, 0);
    ddp_buf_t hex = DDP_BUF_INIT, ka = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_run_token(good_token, strlen(good_token), "a", &hex, &err), 0);
    assert_int_equal(strlen((const char *)hex.data), 64);
    assert_int_equal(rdzv_token_from_hex((const char *)hex.data, &ka, &err), 0);
    assert_int_equal(rdzv_run_token(good_token, strlen(good_token), "", &hex, &err), -EINVAL);
    assert_int_equal(rdzv_run_token(NULL, 0, "a", &hex, &err), DDP_EUSAGE);

    rdzv_client_t *c = NULL;
    /* The run token names its run, or it is just a wrong token. */
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "b", &c, &err), DDP_EAUTH);
    assert_int_equal(connect_run(st->port, ka.data, ka.len, NULL, &c, &err), DDP_EAUTH);
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
    assert_int_equal(rdzv_client_authenticated(c), 1);
    assert_int_equal(rdzv_client_set(c, "__rdzv/a/x", "1", 1, &err), 0);
    assert_int_equal(rdzv_client_set(c, "ddpw/a/0/k", "2", 1, &err), 0);
    int64_t v = 0;
    assert_int_equal(rdzv_client_add(c, "ddpw/a/n", 5, &v, &err), 0);
    assert_int_equal(v, 5);
    rdzv_client_free(c);
    /* Every key outside the run closes the connection. */
    static const char *const outside[] = {"__rdzv/b/x", "__rdzv/ab/x", "__rdzv/a", "x",
                                          "/a/x",       "a/x",         "x/y/a/z",  "ddpw/A/x"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
        ddp_err_clear(&err);
        int rc = rdzv_client_set(c, outside[i], "v", 1, &err);
        if (rc == 0) /* the SET has no reply: the close shows on the next request */
            rc = rdzv_client_ping(c, &err);
        if (rc >= 0)
            fail_msg("key '%s' was served to run a's token", outside[i]);
        rdzv_client_free(c);
    }
    assert_int_equal(connect_run(st->port, ka.data, ka.len, "a", &c, &err), 0);
    int64_t nkeys = 0;
    assert_true(rdzv_client_num_keys(c, &nkeys, &err) < 0);
    rdzv_client_free(c);
    /* The store's token, naming a run or not, reaches every key. */
    assert_int_equal(connect_run(st->port, good_token, strlen(good_token), "b", &c, &err), 0);
    assert_int_equal(rdzv_client_set(c, "__rdzv/b/x", "3", 1, &err), 0);
    ddp_buf_t val = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(c, "__rdzv/a/x", 0, &val, &err), 0);
    assert_int_equal(val.len, 1);
    assert_int_equal(rdzv_client_num_keys(c, &nkeys, &err), 0);
    assert_int_equal(nkeys, 4);
    rdzv_client_free(c);
    ddp_buf_free(&val);
    ddp_buf_free(&hex);
    ddp_buf_free(&ka);
    server_down(st);
}

static void test_auth_and_barrier(void **state) {
    (void)state;
    server_thread_t *st = server_up(good_token, strlen(good_token), 0, 0);
    rdzv_client_t *c = NULL;
    ddp_err_t err;
    assert_int_equal(connect_to(st->port, "wrong-token", 11, &c, &err), DDP_EAUTH);
    assert_null(c);
    assert_non_null(strstr(err.text, "refused the token"));
    assert_int_equal(connect_to(st->port, NULL, 0, &c, &err), DDP_EAUTH);
    assert_non_null(strstr(err.text, "DDPRUN_STORE_TOKEN"));
    c = must_connect(st->port, good_token, strlen(good_token));
    assert_int_equal(rdzv_client_authenticated(c), 1);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_client_set(c, "k", "v", 1, &err), 0);
    ddp_buf_t v = DDP_BUF_INIT;
    assert_int_equal(rdzv_client_get(c, "k", 0, &v, &err), 0);

    barrier_arg_t args[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        args[i].port = st->port;
        args[i].rc = -1;
        assert_int_equal(pthread_create(&th[i], NULL, barrier_rank, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].rc, 0);
    }
    /* A ninth arrival is an error, not a hang. */
    assert_int_equal(rdzv_client_barrier(c, "r3/bar", 8, 1000, &err), DDP_EPROTO);
    ddp_buf_free(&v);
    rdzv_client_free(c);
    server_down(st);
}

static void test_tokens(void **state) {
    (void)state;
    ddp_buf_t t = DDP_BUF_INIT, hex = DDP_BUF_INIT;
    ddp_err_t err;
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_from_hex("00ff10Ab", &t, &err), 0);
    assert_int_equal(t.len, 4);
    assert_memory_equal(t.data, "\x00\xff\x10\xab", 4);
    assert_int_equal(rdzv_token_to_hex(t.data, t.len, &hex), 0);
    assert_string_equal((char *)hex.data, "00ff10ab");
    assert_int_equal(rdzv_token_from_hex(NULL, &t, &err), 0);
    assert_int_equal(t.len, 0);
    assert_int_equal(rdzv_token_from_hex("abc", &t, &err), DDP_EENV);
    assert_non_null(strstr(err.text, "DDPRUN_STORE_TOKEN"));
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_from_hex("zz", &t, &err), DDP_EENV);
    ddp_err_clear(&err);
    assert_int_equal(rdzv_token_generate(&t, 32, &err), 0);
    assert_int_equal(t.len, 32);

    char path[] = "/tmp/rdzv_token_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "secret-token-bytes\n", 19), 19);
    close(fd);
    assert_int_equal(rdzv_token_from_file(path, &t, &err), 0);
    assert_int_equal(t.len, 18);
    assert_memory_equal(t.data, "secret-token-bytes", 18);
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    assert_int_equal(rdzv_token_from_file(path, &t, &err), DDP_EUSAGE);
    unlink(path);
    ddp_err_clear(&err);
    assert_true(rdzv_token_from_file(path, &t, &err) == -ENOENT);
    assert_non_null(strstr(err.text, path));
    ddp_buf_free(&t);
    ddp_buf_free(&hex);
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* rdzv_token_load from the environment (with file as --token-file when not NULL); returns the
 * error text it gave (static), "" on success. */
static const char *load_error(const char *file) {
    static ddp_err_t err;
    ddp_buf_t t = DDP_BUF_INIT;
    ddp_err_clear(&err);
    int rc = rdzv_token_load(file, &t, NULL, &err);
    ddp_buf_free(&t);
    return rc < 0 ? err.text : "";
}

/* Every token error names its one source once (variable, --token-file or the file's variable
 * with its path), says what is expected, and never shows the value. */
static void test_token_messages(void **state) {
    (void)state;
    unsetenv("DDPRUN_TOKEN");
    unsetenv("DDPRUN_TOKEN_FILE");
    unsetenv("DDPRUN_STORE_TOKEN");
    const char *hexvars[] = {"DDPRUN_TOKEN", "DDPRUN_STORE_TOKEN"};
    const char *values[] = {"secretzz", "abc", NULL};
    char big[3001];
    memset(big, 'a', 3000);
    big[3000] = '\0';
    values[2] = big;
    for (size_t v = 0; v < 2; v++) {
        for (size_t i = 0; i < 3; i++) {
            setenv(hexvars[v], values[i], 1);
            const char *e = load_error(NULL);
            print_message("%s=%.8s: %s\n", hexvars[v], values[i], e);
            assert_int_equal(strncmp(e, hexvars[v], strlen(hexvars[v])), 0);
            assert_int_equal(e[strlen(hexvars[v])], ':');
            assert_int_equal(count_of(e, "DDPRUN_"), 1);
            assert_non_null(strstr(e, "expected an even number of hex digits (0-9a-f)"));
            assert_null(strstr(e, "secret"));
            assert_null(strstr(e, "aaaa"));
            unsetenv(hexvars[v]);
        }
    }
    setenv("DDPRUN_TOKEN", "0q", 1);
    assert_non_null(strstr(load_error(NULL), "character 2 of 2 is not a hex digit"));
    unsetenv("DDPRUN_TOKEN");

    char path[] = "/tmp/rdzv_token_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char want[128];
    /* Empty, from the variable and from the flag. */
    setenv("DDPRUN_TOKEN_FILE", path, 1);
    const char *e = load_error(NULL);
    print_message("%s\n", e);
    snprintf(want, sizeof want, "DDPRUN_TOKEN_FILE=%s: the token is 0 bytes: expected 1..1024",
             path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, "DDPRUN_"), 1);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_TOKEN_FILE");
    setenv("DDPRUN_STORE_TOKEN", "00ff", 1); /* the flag wins over any variable */
    e = load_error(path);
    snprintf(want, sizeof want, "--token-file %s: the token is 0 bytes", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, "DDPRUN_"), 0);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_STORE_TOKEN");
    /* Too long. */
    fd = open(path, O_WRONLY | O_TRUNC);
    char chunk[2000];
    memset(chunk, 'k', sizeof chunk);
    assert_int_equal(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk);
    close(fd);
    e = load_error(path);
    snprintf(want, sizeof want, "--token-file %s: more than 1024 bytes: expected 1..1024", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_null(strstr(e, "kkkk"));
    /* Missing. */
    unlink(path);
    setenv("DDPRUN_TOKEN_FILE", path, 1);
    e = load_error(NULL);
    snprintf(want, sizeof want, "DDPRUN_TOKEN_FILE=%s: unable to open: ", path);
    assert_int_equal(strncmp(e, want, strlen(want)), 0);
    assert_int_equal(count_of(e, path), 1);
    unsetenv("DDPRUN_TOKEN_FILE");
    /* A directory. */
    e = load_error("/tmp");
    assert_string_equal(e, "--token-file /tmp: not a regular file: expected a regular file of "
                           "mode 600");
    /* A path with control bytes is escaped. */
    e = load_error("/nonexistent/\x1b[2Jx");
    const char *esc = "--token-file /nonexistent/\\e[2Jx: unable to open";
    assert_int_equal(strncmp(e, esc, strlen(esc)), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_refuses_unauthenticated_store),
        cmocka_unit_test(test_run_token_scope),
        cmocka_unit_test(test_auth_and_barrier),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_token_messages),
    };
    return cmocka_run_group_tests_name("rdzv_client_auth", tests, NULL, NULL);
}
