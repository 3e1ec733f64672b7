/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of train's pieces: DistributedSampler properties over (size, world, epoch)
 * combinations, the gradient against finite differences, data-parallel equivalence (the mean of
 * the ranks' gradients equals the gradient of the union batch), optimizers, checkpoints (torn,
 * corrupt and foreign files fall back to the previous one), the CSV loader's errors, and on a
 * GPU machine the CUDA step against the CPU reference (skipped without a device). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "train.h"
#include "trainer.h"
#ifdef DDP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "train_gpu.h"
#endif

/* ---- sampler ---- */
static void test_sampler_properties(void **state) {
    (void)state;
    size_t sizes[] = {1, 2, 7, 10, 64, 101, 1000};
    int worlds[] = {1, 2, 3, 4, 8, 16};
    uint64_t epochs[] = {0, 1, 5};
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof worlds / sizeof *worlds; b++)
            for (size_t c = 0; c < sizeof epochs / sizeof *epochs; c++) {
                size_t n = sizes[a];
                int world = worlds[b];
                size_t per = train_sampler_num_samples(n, world);
                assert_int_equal(per, (n + (size_t)world - 1) / (size_t)world);
                size_t *count = calloc(n, sizeof *count);
                size_t *idx = malloc(per * sizeof *idx), *again = malloc(per * sizeof *idx);
                for (int r = 0; r < world; r++) {
                    assert_int_equal(
                        train_sampler_indices(n, world, r, 42, epochs[c], 1, idx, NULL), 0);
                    /* Deterministic: the same call gives the same shard. */
                    train_sampler_indices(n, world, r, 42, epochs[c], 1, again, NULL);
                    assert_memory_equal(idx, again, per * sizeof *idx);
                    for (size_t k = 0; k < per; k++) {
                        assert_true(idx[k] < n);
                        count[idx[k]]++;
                    }
                }
                /* Every sample is covered; the padding (per * world - n extra draws) repeats
                 * samples, so each one appears once or, for the padded ones, more. */
                size_t total = 0, extra = 0;
                for (size_t i = 0; i < n; i++) {
                    assert_true(count[i] >= 1);
                    total += count[i];
                    extra += count[i] - 1;
                }
                assert_int_equal(total, per * (size_t)world);
                assert_int_equal(extra, per * (size_t)world - n);
                /* When world divides n the shards are disjoint: each sample exactly once. */
                if (n % (size_t)world == 0)
                    for (size_t i = 0; i < n; i++)
                        assert_int_equal(count[i], 1);
                free(count);
                free(idx);
                free(again);
            }
}

static void test_sampler_epochs_differ(void **state) {
    (void)state;
    size_t a[500], b[500], c[500];
    train_sampler_indices(1000, 2, 0, 7, 0, 1, a, NULL);
    train_sampler_indices(1000, 2, 0, 7, 1, 1, b, NULL);
    train_sampler_indices(1000, 2, 0, 7, 0, 0, c, NULL);
    assert_memory_not_equal(a, b, sizeof a); /* set_epoch reshuffles */
    for (size_t k = 0; k < 500; k++)
        assert_int_equal(c[k], 2 * k); /* no shuffle: rank::world */
    assert_int_equal(train_sampler_indices(10, 2, 2, 0, 0, 1, a, NULL), -EINVAL);
}

/* ---- gradients ---- */
static void make_model(mlp_shape_t *s, const char *spec, float **p, float **g) {
    assert_int_equal(mlp_shape_parse(s, spec, NULL), 0);
    *p = malloc(s->nparams * sizeof(float));
    *g = malloc(s->nparams * sizeof(float));
    mlp_init_params(s, *p, 3);
    /* Non-zero biases so their gradients are exercised away from the ReLU kinks. */
    for (int l = 0; l + 1 < s->nsizes; l++)
        for (int j = 0; j < s->sizes[l + 1]; j++)
            (*p)[s->b_off[l] + (size_t)j] = 0.05f * (float)((j % 5) - 2);
}

static void test_gradient_check(void **state) {
    (void)state;
    mlp_shape_t s;
    float *p, *g;
    make_model(&s, "6,9,7,4", &p, &g);
    train_data_t d;
    assert_int_equal(train_data_synth(&d, 8, 6, 4, 5, NULL), 0);
    mlp_ws_t ws;
    assert_int_equal(mlp_ws_init(&ws, &s, 8), 0);
    mlp_forward_backward(&s, &ws, p, d.x, d.y, 8, g, NULL);
    double worst = 0;
    for (size_t i = 0; i < s.nparams; i++) {
        float o = p[i];
        p[i] = o + 1e-3f;
        double up = mlp_forward_backward(&s, &ws, p, d.x, d.y, 8, NULL, NULL) / 8;
        p[i] = o - 1e-3f;
        double dn = mlp_forward_backward(&s, &ws, p, d.x, d.y, 8, NULL, NULL) / 8;
        p[i] = o;
        double num = (up - dn) / 2e-3, err = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-2);
        if (err > worst)
            worst = err;
    }
    if (worst > 2e-2)
        fail_msg("gradient check: worst relative error %g", worst);
    mlp_ws_free(&ws);
    train_data_free(&d);
    free(p);
    free(g);
}

/* N ranks with B rows each: the mean of their gradients is the gradient of the N*B rows. */
static void test_data_parallel_equivalence(void **state) {
    (void)state;
    mlp_shape_t s;
    float *p, *g;
    make_model(&s, "16,32,5", &p, &g);
    const int N = 4, B = 12;
    train_data_t d;
    assert_int_equal(train_data_synth(&d, (size_t)(N * B), 16, 5, 9, NULL), 0);
    mlp_ws_t ws;
    assert_int_equal(mlp_ws_init(&ws, &s, N * B), 0);
    float *avg = calloc(s.nparams, sizeof(float));
    for (int r = 0; r < N; r++) {
        mlp_forward_backward(&s, &ws, p, d.x + (size_t)r * B * 16, d.y + r * B, B, g, NULL);
        for (size_t i = 0; i < s.nparams; i++)
            avg[i] += g[i] / (float)N;
    }
    mlp_forward_backward(&s, &ws, p, d.x, d.y, N * B, g, NULL);
    for (size_t i = 0; i < s.nparams; i++)
        if (fabsf(avg[i] - g[i]) > 1e-5f + 1e-4f * fabsf(g[i]))
            fail_msg("param %zu: mean of ranks %.8g, union batch %.8g", i, avg[i], g[i]);
    free(avg);
    mlp_ws_free(&ws);
    train_data_free(&d);
    free(p);
    free(g);
}

static void test_optimizers(void **state) {
    (void)state;
    optim_t o;
    float p[2] = {1, 1}, g[2] = {1, -2};
    assert_int_equal(optim_init(&o, OPT_SGD, 2, 0.1f, 0.9f), 0);
    optim_step(&o, p, g); /* buf = g */
    assert_float_equal(p[0], 0.9f, 1e-6);
    optim_step(&o, p, g); /* buf = 0.9 g + g = 1.9 g */
    assert_float_equal(p[0], 0.9f - 0.19f, 1e-6);
    assert_float_equal(p[1], 1.2f + 0.38f, 1e-6);
    assert_int_equal(optim_state_len(&o), 2);
    optim_free(&o);
    float q[2] = {1, 1};
    assert_int_equal(optim_init(&o, OPT_ADAM, 2, 0.01f, 0), 0);
    optim_step(&o, q, g); /* first Adam step moves each weight by lr * sign(g) */
    assert_float_equal(q[0], 0.99f, 1e-5);
    assert_float_equal(q[1], 1.01f, 1e-5);
    assert_int_equal(optim_state_len(&o), 4);
    optim_free(&o);
}

/* A small model learns the synthetic task far above chance (4 classes: 25%). */
static void test_learns(void **state) {
    (void)state;
    mlp_shape_t s;
    float *p, *g;
    make_model(&s, "16,64,4", &p, &g);
    train_data_t d;
    assert_int_equal(train_data_synth(&d, 2048, 16, 4, 1, NULL), 0);
    mlp_ws_t ws;
    assert_int_equal(mlp_ws_init(&ws, &s, 2048), 0);
    optim_t o;
    assert_int_equal(optim_init(&o, OPT_ADAM, s.nparams, 0.01f, 0), 0);
    for (int epoch = 0; epoch < 8; epoch++)
        for (int b = 0; b < 2048; b += 32) {
            mlp_forward_backward(&s, &ws, p, d.x + (size_t)b * 16, d.y + b, 32, g, NULL);
            optim_step(&o, p, g);
        }
    int hits = 0;
    mlp_forward_backward(&s, &ws, p, d.x, d.y, 2048, NULL, &hits);
    if (hits < 2048 * 7 / 10)
        fail_msg("accuracy %.3f after training", hits / 2048.0);
    optim_free(&o);
    mlp_ws_free(&ws);
    train_data_free(&d);
    free(p);
    free(g);
}

/* ---- checkpoints ---- */
static char g_dir[64];

static void ckpt_path(char *out, size_t cap, uint64_t step) {
    snprintf(out, cap, "%s/ckpt-%020llu.bin", g_dir, (unsigned long long)step);
}

static void save_step(const mlp_shape_t *s, uint64_t step, float fill, int keep) {
    float *p = malloc(s->nparams * sizeof(float)), *st = malloc(s->nparams * sizeof(float));
    for (size_t i = 0; i < s->nparams; i++) {
        p[i] = fill + (float)i;
        st[i] = -fill;
    }
    ckpt_meta_t m = {step, step / 10, step % 10, step, OPT_SGD, 1};
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ckpt_save(g_dir, s, &m, p, st, s->nparams, keep, &e), 0);
    free(p);
    free(st);
}

static uint64_t load_step(const mlp_shape_t *s, int *skipped, float *first) {
    float *p = malloc(s->nparams * sizeof(float)), *st = malloc(s->nparams * sizeof(float));
    ckpt_meta_t m;
    int found = 0;
    char used[256], why[256];
    assert_int_equal(ckpt_load_latest(g_dir, s, &m, p, st, s->nparams, &found, used, skipped, why,
                                      sizeof used, NULL),
                     0);
    uint64_t step = found ? m.step : 0;
    if (first != NULL)
        *first = found ? p[0] : -1;
    free(p);
    free(st);
    return step;
}

static void test_checkpoint_fallback(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ddpw-ckpt-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    mlp_shape_t s;
    assert_int_equal(mlp_shape_parse(&s, "4,8,3", NULL), 0);
    int skipped;
    float first;
    assert_int_equal(load_step(&s, &skipped, NULL), 0); /* empty directory */
    save_step(&s, 10, 1, 3);
    save_step(&s, 20, 2, 3);
    save_step(&s, 30, 3, 3);
    assert_int_equal(load_step(&s, &skipped, &first), 30);
    assert_int_equal(skipped, 0);
    assert_float_equal(first, 3, 0);

    /* Corrupt one byte of the newest: the checksum catches it, step 20 is used. */
    char path[128];
    ckpt_path(path, sizeof path, 30);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, 200), 1);
    byte ^= 0x40;
    assert_int_equal(pwrite(fd, &byte, 1, 200), 1);
    close(fd);
    assert_int_equal(load_step(&s, &skipped, &first), 20);
    assert_int_equal(skipped, 1);
    assert_float_equal(first, 2, 0);

    /* Torn: the next newest is cut short; step 10 is used. */
    ckpt_path(path, sizeof path, 20);
    assert_int_equal(truncate(path, 150), 0);
    assert_int_equal(load_step(&s, &skipped, NULL), 10);
    assert_int_equal(skipped, 2);

    /* A leftover temporary file and a checkpoint of another model are ignored. */
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s/.ckpt-00000000000000000040.tmp.1", g_dir);
    FILE *f = fopen(tmp, "w");
    fputs("partial", f);
    fclose(f);
    mlp_shape_t other;
    assert_int_equal(mlp_shape_parse(&other, "4,9,3", NULL), 0);
    save_step(&other, 50, 5, 10);
    assert_int_equal(load_step(&s, &skipped, NULL), 10);

    /* keep: only the newest N stay. */
    for (uint64_t st = 100; st < 106; st++)
        save_step(&s, st, 7, 3);
    ckpt_path(path, sizeof path, 102);
    assert_int_equal(access(path, F_OK), -1);
    ckpt_path(path, sizeof path, 103);
    assert_int_equal(access(path, F_OK), 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
}

/* A directory whose only checkpoint fails its checksum: nothing is found, and the buffers hold
 * no bytes of the corrupt file (the optimizer state must start from zero, not garbage). */
static void test_checkpoint_corrupt_only(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ddpw-ckpt-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    mlp_shape_t s;
    assert_int_equal(mlp_shape_parse(&s, "4,8,3", NULL), 0);
    save_step(&s, 10, 1, 3); /* state filled with -1.0f */
    char path[128];
    ckpt_path(path, sizeof path, 10);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, sb.st_size - 1), 1); /* last byte of the state */
    byte ^= 0x01;
    assert_int_equal(pwrite(fd, &byte, 1, sb.st_size - 1), 1);
    close(fd);
    float *p = malloc(s.nparams * sizeof(float)), *st = malloc(s.nparams * sizeof(float));
    for (size_t i = 0; i < s.nparams; i++)
        p[i] = st[i] = 0;
    ckpt_meta_t m;
    int found = 1, skipped = 0;
    char used[256], why[256];
    assert_int_equal(ckpt_load_latest(g_dir, &s, &m, p, st, s.nparams, &found, used, &skipped, why,
                                      sizeof used, NULL),
                     0);
    assert_int_equal(found, 0);
    assert_int_equal(skipped, 1);
    for (size_t i = 0; i < s.nparams; i++) {
        assert_true(p[i] == 0.0f);
        assert_true(st[i] == 0.0f);
    }
    free(p);
    free(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- CSV ---- */
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_csv(void **state) {
    (void)state;
    const char *path = "/tmp/ddpw-test.csv";
    write_text(path, "label,a,b,c\n1,0.5,1,2\n\n# comment\n0, -1, 2.5e1 ,3\n2,0,0,0\n");
    train_data_t d;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(train_data_load_csv(&d, path, &e), 0);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.dim, 3);
    assert_int_equal(d.classes, 3);
    assert_int_equal(d.y[1], 0);
    assert_float_equal(d.x[4], 25.0f, 0);
    train_data_free(&d);
    /* The header may follow comments and blank lines (docs/worker.md: both are skipped). */
    write_text(path, "# exported by a tool\n\nlabel,a\n1,0.5\n0,2\n");
    ddp_err_clear(&e);
    assert_int_equal(train_data_load_csv(&d, path, &e), 0);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.dim, 1);
    train_data_free(&d);
    struct {
        const char *text, *expect;
    } bad[] = {
        {"1,2,3\n0,1,x\n", ":2: field 3 ('x') is not a number"},
        {"1,2,3\n0,1\n", ":2: 1 features where earlier rows have 2"},
        {"1,2\n-1,3\n", ":2: label '-1'"},
        {"1,2\n1.5,3\n", ":2: label '1.5'"},
        {"1,2\n3,4,\n", ":2: field 3 ('') is not a number"},
        {"", ": no data rows"},
        {"label,a\nlabel,b\n1,2\n", ":2: field 1 ('label') is not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].text);
        ddp_err_clear(&e);
        assert_int_not_equal(train_data_load_csv(&d, path, &e), 0);
        if (strstr(e.text, bad[i].expect) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, e.text, bad[i].expect);
    }
    ddp_err_clear(&e);
    assert_int_equal(train_data_load_csv(&d, "/nonexistent/x.csv", &e), -ENOENT);
    unlink(path);
}

/* ---- hostile checkpoint directories ---- */
static void write_victim(const char *path) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("precious", f);
    fclose(f);
}

static void assert_victim_intact(const char *path) {
    char buf[32] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, "precious");
}

/* Symlinks planted where the temporary file of a save would go (the names a predictable
 * ".ckpt-<step>.tmp.<pid>" scheme gives) are never written through: the save creates its
 * temporary file exclusively. */
static void test_checkpoint_tmp_symlink(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ddpw-ckpt-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    char victim[128], link[160];
    snprintf(victim, sizeof victim, "%s.victim", g_dir);
    write_victim(victim);
    for (long pid = getpid(); pid < getpid() + 4; pid++) {
        snprintf(link, sizeof link, "%s/.ckpt-%020llu.tmp.%ld", g_dir, 70ull, pid);
        assert_int_equal(symlink(victim, link), 0);
    }
    mlp_shape_t s;
    assert_int_equal(mlp_shape_parse(&s, "4,8,3", NULL), 0);
    save_step(&s, 70, 1, 3);
    assert_victim_intact(victim);
    int skipped;
    assert_int_equal(load_step(&s, &skipped, NULL), 70);
    struct stat st;
    char path[128];
    ckpt_path(path, sizeof path, 70);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", g_dir, victim);
    assert_int_equal(system(cmd), 0);
}

/* A directory that others may write without the sticky bit is refused for saving and loading,
 * in one line naming it and its mode; the sticky bit (as on /tmp) or a private mode is fine. */
static void test_checkpoint_dir_mode(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ddpw-ckpt-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    mlp_shape_t s;
    assert_int_equal(mlp_shape_parse(&s, "4,8,3", NULL), 0);
    size_t n = s.nparams;
    float *p = calloc(n, sizeof(float)), *st = calloc(n, sizeof(float));
    ckpt_meta_t m = {5, 0, 5, 5, OPT_SGD, 1};
    mode_t modes[] = {0777, 0770, 0757};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        assert_int_equal(chmod(g_dir, modes[i]), 0);
        ddp_err_t e;
        ddp_err_clear(&e);
        assert_int_equal(ckpt_save(g_dir, &s, &m, p, st, n, 3, &e), DDP_EUSAGE);
        char want[128];
        snprintf(want, sizeof want, "%s", g_dir);
        if (strstr(e.text, want) == NULL || strstr(e.text, "mode 0") == NULL ||
            strchr(e.text, '\n') != NULL)
            fail_msg("mode %o: '%s'", (unsigned)modes[i], e.text);
        int found = 1, skipped = 0;
        char used[256], why[256];
        ddp_err_clear(&e);
        assert_int_equal(
            ckpt_load_latest(g_dir, &s, &m, p, st, n, &found, used, &skipped, why, sizeof used, &e),
            DDP_EUSAGE);
    }
    assert_int_equal(chmod(g_dir, 01777), 0);
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(ckpt_save(g_dir, &s, &m, p, st, n, 3, &e), 0);
    assert_int_equal(chmod(g_dir, 0700), 0);
    assert_int_equal(ckpt_save(g_dir, &s, &m, p, st, n, 3, &e), 0);
    free(p);
    free(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_train: a FIFO checkpoint hung the loader\n";
    ssize_t k = write(2, msg, sizeof msg - 1);
    (void)k;
    _exit(3);
}

/* A FIFO (or any non-regular file) named like a checkpoint is skipped, never opened for a
 * blocking read: the loader falls back to the newest regular checkpoint. */
static void test_checkpoint_fifo(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/ddpw-ckpt-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    mlp_shape_t s;
    assert_int_equal(mlp_shape_parse(&s, "4,8,3", NULL), 0);
    save_step(&s, 10, 1, 3);
    char path[128];
    ckpt_path(path, sizeof path, 99);
    assert_int_equal(mkfifo(path, 0600), 0);
    signal(SIGALRM, on_alarm);
    alarm(10); /* bounded: a blocking open of the FIFO would wait for a writer forever */
    float *p = malloc(s.nparams * sizeof(float)), *st = malloc(s.nparams * sizeof(float));
    ckpt_meta_t m;
    int found = 0, skipped = 0;
    char used[256], why[256];
    assert_int_equal(ckpt_load_latest(g_dir, &s, &m, p, st, s.nparams, &found, used, &skipped, why,
                                      sizeof used, NULL),
                     0);
    alarm(0);
    assert_int_equal(found, 1);
    assert_int_equal(m.step, 10);
    assert_int_equal(skipped, 1);
    if (strstr(why, "not a regular file") == NULL)
        fail_msg("skip reason: '%s'", why);
    free(p);
    free(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- hostile CSV values and flags ---- */
static void test_csv_limits(void **state) {
    (void)state;
    const char *path = "/tmp/ddpw-test-limits.csv";
    struct {
        const char *text, *expect;
    } bad[] = {
        {"1,2,3\n0,1e39,1\n", ":2: field 2 ('1e39') is not a finite float32"},
        {"1,-4e38\n", ":1: field 2 ('-4e38') is not a finite float32"},
        {"1,2\n0,nan\n", ":2: field 2 ('nan') is not a number"},
    };
    train_data_t d;
    ddp_err_t e;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].text);
        ddp_err_clear(&e);
        assert_int_not_equal(train_data_load_csv(&d, path, &e), 0);
        if (strstr(e.text, bad[i].expect) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, e.text, bad[i].expect);
    }
    /* A row longer than TRAIN_CSV_MAX_LINE is refused at that line, without reading it whole. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("1,2\n0", f);
    for (size_t k = 0; k < TRAIN_CSV_MAX_LINE / 2 + 10; k++)
        fputs(",1", f);
    fputs("\n", f);
    fclose(f);
    ddp_err_clear(&e);
    assert_int_equal(train_data_load_csv(&d, path, &e), DDP_ETOOBIG);
    if (strstr(e.text, "ddpw-test-limits.csv:2:") == NULL || strstr(e.text, "longer than") == NULL)
        fail_msg("long line: '%s'", e.text);
    /* More features than a layer may have: named by file and line, not blamed on --layers. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("1", f);
    for (int k = 0; k < MLP_MAX_WIDTH + 1; k++)
        fputs(",1", f);
    fputs("\n", f);
    fclose(f);
    ddp_err_clear(&e);
    assert_int_equal(train_data_load_csv(&d, path, &e), DDP_ETOOBIG);
    if (strstr(e.text, "ddpw-test-limits.csv:1:") == NULL || strstr(e.text, "features") == NULL)
        fail_msg("wide row: '%s'", e.text);
    unlink(path);
}

static int parse_flags(const char *flag, const char *value, train_args_t *a, ddp_err_t *e) {
    char *argv[] = {(char *)"train", (char *)flag, (char *)value, NULL};
    ddp_err_clear(e);
    return train_args_parse(3, argv, a, e);
}

/* Real-valued flags are finite and in range: 1e39 overflows float32 and would train on inf. */
static void test_flag_ranges(void **state) {
    (void)state;
    train_args_t a;
    ddp_err_t e;
    struct {
        const char *flag, *value;
    } bad[] = {
        {"--lr", "1e39"}, {"--lr", "0"},       {"--lr", "inf"},        {"--lr", "nan"},
        {"--lr", "1e7"},  {"--momentum", "1"}, {"--momentum", "1e39"}, {"--momentum", "-0.1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(parse_flags(bad[i].flag, bad[i].value, &a, &e), DDP_EUSAGE);
        if (strstr(e.text, bad[i].flag) == NULL)
            fail_msg("%s %s: '%s'", bad[i].flag, bad[i].value, e.text);
    }
    assert_int_equal(parse_flags("--lr", "0.5", &a, &e), 0);
    assert_true(a.lr == 0.5);
    assert_int_equal(parse_flags("--momentum", "0", &a, &e), 0);
    assert_int_equal(parse_flags("--momentum", "0.99", &a, &e), 0);
}

static void test_layers_parse(void **state) {
    (void)state;
    mlp_shape_t s;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(mlp_shape_parse(&s, "512,1024,512,10", &e), 0);
    assert_true(s.nparams > 1000000 && s.nparams < 1100000); /* the default is about 1M */
    const char *bad[] = {
        "", "10", "10,,5", "10,x", "10,0", "10,1", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ddp_err_clear(&e);
        assert_int_equal(mlp_shape_parse(&s, bad[i], &e), DDP_EUSAGE);
        assert_non_null(strstr(e.text, "--layers"));
    }
}

/* ---- the GPU path against the CPU reference (needs a CUDA device) ---- */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
#ifndef DDP_HAVE_CUDA
    skip();
#else
    int ndev = 0, driver = 0;
    cudaError_t qe = cudaGetDeviceCount(&ndev);
    (void)cudaDriverGetVersion(&driver);
    /* Skipped only without a driver or device: a driver whose query fails (too old for this
     * runtime, a broken install) is a failure to report, not a machine without a GPU. */
    if (qe != cudaSuccess && driver > 0)
        fail_msg("cudaGetDeviceCount: %s (driver %d)", cudaGetErrorString(qe), driver);
    if (qe != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        skip();
    }
    mlp_shape_t s;
    float *p, *g;
    make_model(&s, "64,256,128,10", &p, &g);
    train_data_t d;
    assert_int_equal(train_data_synth(&d, 256, 64, 10, 4, NULL), 0);
    mlp_ws_t ws;
    assert_int_equal(mlp_ws_init(&ws, &s, 64), 0);
    optim_t cpu, dummy;
    assert_int_equal(optim_init(&cpu, OPT_ADAM, s.nparams, 0.001f, 0), 0);
    assert_int_equal(optim_init(&dummy, OPT_ADAM, s.nparams, 0.001f, 0), 0);
    gpu_model_t *m = NULL;
    ddp_err_t e;
    ddp_err_clear(&e);
    assert_int_equal(gpu_model_new(&s, &cpu, 64, 0, 1 << 12, &m, &e), 0);
    float *state0 = calloc(2 * s.nparams, sizeof(float));
    assert_int_equal(gpu_model_set_state(m, p, state0, 0, &e), 0);
    float *gg = malloc(s.nparams * sizeof(float)), *gp = malloc(s.nparams * sizeof(float));
    for (int step = 0; step < 4; step++) {
        const float *x = d.x + (size_t)step * 64 * 64;
        const int32_t *y = d.y + step * 64;
        int cc = 0, gc = 0;
        double cl = mlp_forward_backward(&s, &ws, p, x, y, 64, g, &cc), gl = 0;
        optim_step(&cpu, p, g);
        assert_int_equal(gpu_model_step(m, NULL, x, y, 64, &gl, &gc, gg, &e), 0);
        assert_true(fabs(cl - gl) < 1e-3 * fabs(cl) + 1e-3);
        for (size_t i = 0; i < s.nparams; i++)
            if (fabsf(gg[i] - g[i]) > 1e-4f + 1e-3f * fabsf(g[i]))
                fail_msg("step %d grad %zu: gpu %.8g cpu %.8g", step, i, gg[i], g[i]);
    }
    uint64_t t;
    assert_int_equal(gpu_model_get_state(m, gp, state0, &t, &e), 0);
    assert_int_equal(t, 4);
    for (size_t i = 0; i < s.nparams; i++)
        if (fabsf(gp[i] - p[i]) > 1e-4f + 1e-3f * fabsf(p[i]))
            fail_msg("param %zu: gpu %.8g cpu %.8g", i, gp[i], p[i]);
    gpu_model_free(m);
    free(gg);
    free(gp);
    free(state0);
    optim_free(&cpu);
    optim_free(&dummy);
    mlp_ws_free(&ws);
    train_data_free(&d);
    free(p);
    free(g);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_properties),
        cmocka_unit_test(test_sampler_epochs_differ),
        cmocka_unit_test(test_gradient_check),
        cmocka_unit_test(test_data_parallel_equivalence),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_checkpoint_fallback),
        cmocka_unit_test(test_checkpoint_corrupt_only),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_layers_parse),
        cmocka_unit_test(test_checkpoint_tmp_symlink),
        cmocka_unit_test(test_checkpoint_dir_mode),
        cmocka_unit_test(test_checkpoint_fifo),
        cmocka_unit_test(test_csv_limits),
        cmocka_unit_test(test_flag_ranges),
        cmocka_unit_test(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
