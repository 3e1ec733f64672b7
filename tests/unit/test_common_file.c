/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of ddp_file_open, ddp_dir_make and ddp_file_replace (common/ddp_file.c) against what
 * another user can plant in a directory ddprun writes into: a symbolic link (to a file or for a
 * directory), a hard link, a FIFO with and without a reader. Each case checks that the planted
 * target is untouched and that nothing blocks. Also ddp_dir_empty and ddp_dir_remove, which
 * never follow a link out of the tree they remove. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_file.h"

typedef struct fixture {
    char dir[64];    /* the trusted directory (a --log_dir) */
    char victim[96]; /* a file outside it that must never change */
} fixture_t;

static void remove_tree(const char *path) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state) {
    fixture_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ddp-file-test-XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        free(f);
        return -1;
    }
    snprintf(f->victim, sizeof f->victim, "%s.victim", f->dir);
    FILE *v = fopen(f->victim, "w");
    fputs("precious\n", v);
    fclose(v);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture_t *f = *state;
    remove_tree(f->dir);
    unlink(f->victim);
    free(f);
    return 0;
}

static void victim_untouched(const fixture_t *f) {
    char buf[64] = "";
    FILE *v = fopen(f->victim, "r");
    assert_non_null(v);
    size_t n = fread(buf, 1, sizeof buf - 1, v);
    fclose(v);
    buf[n] = '\0';
    assert_string_equal(buf, "precious\n");
}

/* path = f->dir + "/" + rel, in buf. */
static const char *in_dir(const fixture_t *f, const char *rel, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", f->dir, rel);
    return buf;
}

static void test_plain_file_appended_and_replaced(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX];
    in_dir(f, "a.log", p, sizeof p);
    ddp_err_t err = {0};
    int fd = ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "one\n", 4), 4);
    close(fd);
    fd = ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err);
    assert_int_equal(write(fd, "two\n", 4), 4);
    close(fd);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 8);
    fd = ddp_file_open(p, strlen(f->dir), DDP_FILE_REPLACE, 0600, &err);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(err.code, 0);
}

static void test_symlink_refused(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX];
    in_dir(f, "stdout.log", p, sizeof p);
    assert_int_equal(symlink(f->victim, p), 0);
    ddp_err_t err = {0};
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -ELOOP);
    assert_non_null(strstr(err.text, "stdout.log: a symbolic link, not followed"));
    victim_untouched(f);
    /* Replacing removes the link itself and writes a fresh file of ours. */
    int fd = ddp_file_open(p, strlen(f->dir), DDP_FILE_REPLACE, 0644, NULL);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "stacks\n", 7), 7);
    close(fd);
    victim_untouched(f);
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

static void test_hard_link_refused(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX];
    in_dir(f, "stderr.log", p, sizeof p);
    if (link(f->victim, p) < 0)
        skip(); /* another file system, or protected_hardlinks for a non-root run */
    ddp_err_t err = {0};
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -EINVAL);
    assert_non_null(strstr(err.text, "has 2 hard links"));
    victim_untouched(f);
}

static void test_fifo_refused_without_blocking(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX];
    in_dir(f, "events.json", p, sizeof p);
    assert_int_equal(mkfifo(p, 0644), 0);
    ddp_err_t err = {0};
    /* No reader: a blocking open would wait for ever. */
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -EINVAL);
    assert_non_null(strstr(err.text, "events.json: a FIFO, not a regular file"));
    /* With a reader the open succeeds in the kernel; the file is still refused. */
    int rd = open(p, O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    ddp_err_clear(&err);
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -EINVAL);
    assert_non_null(strstr(err.text, "a FIFO, not a regular file"));
    close(rd);
    /* A device, and a directory. */
    ddp_err_clear(&err);
    assert_int_equal(ddp_file_open("/dev/null", 4, DDP_FILE_APPEND, 0644, &err), -EINVAL);
    assert_non_null(strstr(err.text, "a character device"));
    ddp_err_clear(&err);
    assert_true(ddp_file_open(f->dir, ddp_file_dir_len(f->dir), DDP_FILE_APPEND, 0644, &err) < 0);
    assert_non_null(strstr(err.text, "directory"));
}

/* A directory below the trusted one replaced by a link: ddp_dir_make refuses it, and so does a
 * later open through it (the walk is made again at every open). */
static void test_linked_directory_refused(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX], target[128];
    snprintf(target, sizeof target, "%s.elsewhere", f->dir);
    assert_int_equal(mkdir(target, 0755), 0);
    in_dir(f, "attempt_0", p, sizeof p);
    assert_int_equal(symlink(target, p), 0);
    ddp_err_t err = {0};
    in_dir(f, "attempt_0/0", p, sizeof p);
    assert_int_equal(ddp_dir_make(p, strlen(f->dir), 0755, &err), -ELOOP);
    assert_non_null(strstr(err.text, "/attempt_0: a symbolic link, not followed"));
    ddp_err_clear(&err);
    in_dir(f, "attempt_0/stacks.txt", p, sizeof p);
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_REPLACE, 0644, &err), -ELOOP);
    struct stat st;
    char planted[PATH_MAX];
    snprintf(planted, sizeof planted, "%s/stacks.txt", target);
    assert_int_equal(stat(planted, &st), -1); /* nothing written behind the link */
    remove_tree(target);
    /* The trusted part itself may be a link: the user named it. */
    char alias[128];
    snprintf(alias, sizeof alias, "%s.alias", f->dir);
    assert_int_equal(symlink(f->dir, alias), 0);
    snprintf(p, sizeof p, "%s/attempt_1/3", alias);
    assert_int_equal(ddp_dir_make(p, strlen(alias), 0755, NULL), 0);
    snprintf(p, sizeof p, "%s/attempt_1/3/stdout.log", alias);
    int fd = ddp_file_open(p, strlen(alias), DDP_FILE_APPEND, 0644, NULL);
    assert_true(fd >= 0);
    close(fd);
    unlink(alias);
    in_dir(f, "attempt_1/3/stdout.log", p, sizeof p);
    assert_int_equal(stat(p, &st), 0);
}

static void test_dir_make_and_errors(void **state) {
    fixture_t *f = *state;
    char p[PATH_MAX];
    in_dir(f, "a/b/c", p, sizeof p);
    assert_int_equal(ddp_dir_make(p, strlen(f->dir), 0700, NULL), 0);
    assert_int_equal(ddp_dir_make(p, strlen(f->dir), 0700, NULL), 0); /* exists: fine */
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* A file where a directory should be. */
    in_dir(f, "a/file", p, sizeof p);
    int fd = ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, NULL);
    close(fd);
    in_dir(f, "a/file/x", p, sizeof p);
    ddp_err_t err = {0};
    assert_int_equal(ddp_dir_make(p, strlen(f->dir), 0755, &err), -ENOTDIR);
    /* A missing directory when opening a file is an error, not made. */
    ddp_err_clear(&err);
    in_dir(f, "none/x.log", p, sizeof p);
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -ENOENT);
    assert_non_null(strstr(err.text, "/none: "));
    /* ".." cannot climb out of the trusted directory. */
    ddp_err_clear(&err);
    in_dir(f, "../escape.log", p, sizeof p);
    assert_int_equal(ddp_file_open(p, strlen(f->dir), DDP_FILE_APPEND, 0644, &err), -EINVAL);
    assert_int_equal(ddp_file_dir_len("/tmp/x.json"), 4);
    assert_int_equal(ddp_file_dir_len("x.json"), 0);
    assert_int_equal(ddp_file_dir_len("/x.json"), 0);
}

/* Entries in dir, "." and ".." left out. */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void file_is(const char *path, const char *want) {
    char buf[128] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

/* ddp_file_replace writes its parts in order through a temporary file it renames over the path:
 * an existing file gets the new content, a link planted at the path is replaced (its target
 * untouched), the temporary file is gone afterwards, and on an error (a missing directory, a
 * rename onto a directory) nothing is left behind. */
static void test_replace(void **state) {
    fixture_t *f = *state;
    char path[128], tmp[160];
    snprintf(path, sizeof path, "%s/error.json", f->dir);
    const ddp_file_part_t parts[] = {{"ab", 2}, {"", 0}, {"cd\n", 3}};
    assert_int_equal(ddp_file_replace(path, NULL, parts, 3, 0600, 0), 0);
    file_is(path, "abcd\n");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(ddp_file_replace(path, NULL, parts + 2, 1, 0644, 1), 0);
    file_is(path, "cd\n");
    assert_int_equal(entries(f->dir), 1);
    /* A link to the victim, planted at the name: replaced, never written through. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(f->victim, path), 0);
    assert_int_equal(ddp_file_replace(path, NULL, parts, 1, 0644, 0), 0);
    victim_untouched(f);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    file_is(path, "ab");
    /* A temporary name of its own (a checkpoint's), in the same directory. */
    snprintf(tmp, sizeof tmp, "%s/.tmp.", f->dir);
    assert_int_equal(ddp_file_replace(path, tmp, parts + 2, 1, 0644, 1), 0);
    file_is(path, "cd\n");
    assert_int_equal(entries(f->dir), 1);
    /* Errors leave nothing: a missing directory, a directory at the path. */
    snprintf(tmp, sizeof tmp, "%s/missing/file", f->dir);
    assert_int_equal(ddp_file_replace(tmp, NULL, parts, 1, 0644, 0), -ENOENT);
    snprintf(tmp, sizeof tmp, "%s/sub", f->dir);
    assert_int_equal(mkdir(tmp, 0700), 0);
    snprintf(path, sizeof path, "%s/sub/x", f->dir);
    FILE *x = fopen(path, "w");
    fclose(x);
    assert_true(ddp_file_replace(tmp, NULL, parts, 1, 0644, 0) < 0);
    assert_int_equal(entries(f->dir), 2); /* error.json and sub */
    assert_int_equal(entries(tmp), 1);
}

/* ddp_file_tmp_open makes a new file exclusively under a random name; a name that cannot fit
 * is refused before anything is made. */
static void test_tmp_open(void **state) {
    fixture_t *f = *state;
    char prefix[96], a[128], b[128];
    snprintf(prefix, sizeof prefix, "%s/t.", f->dir);
    int fa = ddp_file_tmp_open(prefix, 0600, a, sizeof a);
    int fb = ddp_file_tmp_open(prefix, 0600, b, sizeof b);
    assert_true(fa >= 0 && fb >= 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strlen(a), strlen(prefix) + 16);
    assert_int_equal(ddp_write_all(fa, "x", 1), 0);
    close(fa);
    close(fb);
    file_is(a, "x");
    assert_int_equal(ddp_file_tmp_open(prefix, 0600, a, strlen(prefix) + 16), -ENAMETOOLONG);
    assert_int_equal(entries(f->dir), 2);
}

/* ddp_dir_empty removes a whole tree below a directory and counts its direct entries; a link to
 * a directory outside is removed, and what it pointed to stays. ddp_dir_remove takes the
 * directory too; a missing one is nothing to do. */
static void test_dir_empty_and_remove(void **state) {
    fixture_t *f = *state;
    char outside[96], path[192];
    snprintf(outside, sizeof outside, "%s.outside", f->dir);
    assert_int_equal(mkdir(outside, 0700), 0);
    snprintf(path, sizeof path, "%s/keep", outside);
    FILE *k = fopen(path, "w");
    fclose(k);
    snprintf(path, sizeof path, "%s/a/b/c", f->dir);
    assert_int_equal(ddp_dir_make(path, strlen(f->dir), 0700, NULL), 0);
    snprintf(path, sizeof path, "%s/a/b/c/file", f->dir);
    k = fopen(path, "w");
    fclose(k);
    snprintf(path, sizeof path, "%s/link", f->dir);
    assert_int_equal(symlink(outside, path), 0);
    snprintf(path, sizeof path, "%s/a/victim", f->dir);
    assert_int_equal(symlink(f->victim, path), 0);
    snprintf(path, sizeof path, "%s/top", f->dir);
    k = fopen(path, "w");
    fclose(k);
    assert_int_equal(ddp_dir_empty(f->dir), 3); /* a, link, top */
    assert_int_equal(entries(f->dir), 0);
    assert_int_equal(entries(outside), 1);
    victim_untouched(f);
    snprintf(path, sizeof path, "%s/d", f->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    ddp_dir_remove(path);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(ddp_dir_empty(path), 0);
    snprintf(path, sizeof path, "%s/keep", outside);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(outside), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_file_appended_and_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_link_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_refused_without_blocking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linked_directory_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_make_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tmp_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_empty_and_remove, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
