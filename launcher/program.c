/* SPDX-License-Identifier: Apache-2.0
 * launch_program_argv: the worker's argv by torchrun's rules (python3 -u for .py, -m, --run_path,
 * --no_python), with the program found and checked before anything starts, so a typo is a usage
 * error (exit 2) and the child after fork needs no PATH search. */
#include "launch_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp_escape.h"

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
#define PQ 96 /* paths are quoted up to this many characters */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Checks a path that names a file: 0, or DDP_EUSAGE naming what and path. need_exec asks for X_OK
 * (an executable), else R_OK (a script). */
static int check_file(const char *what, const char *path, int need_exec, ddp_err_t *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' not found", what, PQ, path);
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s': %s", what, PQ, path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode))
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' is a directory", what, PQ, path);
    if (access(path, need_exec ? X_OK : R_OK) != 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' is not %s", what, PQ, path,
                           need_exec ? "executable" : "readable");
    return 0;
}

/* A script's interpreter: when path starts with "#!", the interpreter it names must exist and be
 * executable, or exec would fail with ENOENT (or EACCES) although the script itself is there, and
 * the worker would report the script as missing. Returns 0 (also for a file that is not a script
 * or cannot be read) or DDP_EUSAGE naming the script and its interpreter. */
static int check_interpreter(const char *what, const char *path, ddp_err_t *err) {
    char line[256]; /* the kernel reads this much of a #! line (BINPRM_BUF_SIZE) */
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    if (n < 2 || line[0] != '#' || line[1] != '!')
        return 0;
    char *p = line + 2;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t len = strcspn(p, " \t\n");
    p[len] = '\0';
    if (len == 0)
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' has a #! line without an interpreter", what,
                           PQ, path);
    struct stat st;
    int missing = stat(p, &st) != 0, e = errno;
    if (!missing && !S_ISDIR(st.st_mode) && access(p, X_OK) == 0)
        return 0;
    /* The line may end in CR (a file saved with CRLF): shown escaped, it explains itself. */
    char shown[4 * 64 + 8];
    ddp_str_escape(shown, sizeof shown, p, len < 64 ? len : 64);
    return ddp_err_set(
        err, DDP_EUSAGE, "%s '%.*s': its interpreter '%s' (#! line) %s", what, PQ / 2, path, shown,
        missing ? (e == ENOENT || e == ENOTDIR ? "not found" : strerror(e)) : "is not executable");
}

/* Finds name (no '/') in $PATH like execvp. Returns 0 with *out (caller frees), -ENOENT,
 * -EACCES (found but not executable) or -ENOMEM. */
static int search_path(const char *name, char **out) {
    const char *path = getenv("PATH");
    if (path == NULL)
        path = DEFAULT_PATH;
    int seen_eacces = 0;
    size_t nlen = strlen(name);
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        /* An empty PATH entry means the current directory, as for execvp. */
        char *cand = malloc(dlen + nlen + 3);
        if (cand == NULL)
            return -ENOMEM;
        if (dlen == 0)
            snprintf(cand, dlen + nlen + 3, "./%s", name);
        else
            snprintf(cand, dlen + nlen + 3, "%.*s/%s", (int)dlen, p, name);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                *out = cand;
                return 0;
            }
            seen_eacces = 1;
        }
        free(cand);
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    return seen_eacces ? -EACCES : -ENOENT;
}

/* Resolves an executable the way execvp would, into *out (caller frees). */
static int resolve_exec(const char *what, const char *name, char **out, ddp_err_t *err) {
    *out = NULL;
    if (strchr(name, '/') != NULL) {
        int rc = check_file(what, name, 1, err);
        if (rc < 0)
            return rc;
        *out = strdup(name);
        return *out == NULL ? -ENOMEM : 0;
    }
    if (*name == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty name", what);
    int rc = search_path(name, out);
    if (rc == -ENOMEM)
        return rc;
    if (rc == -EACCES)
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' found in PATH but not executable", what, PQ,
                           name);
    if (rc < 0) {
        if (access(name, F_OK) == 0)
            return ddp_err_set(err, DDP_EUSAGE,
                               "%s '%.*s' not found in PATH (use ./%.*s for the file here)", what,
                               PQ / 2, name, PQ / 2, name);
        return ddp_err_set(err, DDP_EUSAGE, "%s '%.*s' not found", what, PQ, name);
    }
    return 0;
}

/* Nonzero when path's last component names a Python interpreter: python, python3, python3.12,
 * python3.13t (free-threaded), python3.12d (debug), pypy3 and the like. */
static int is_python(const char *path) {
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    size_t n = strncmp(base, "python", 6) == 0 ? 6 : strncmp(base, "pypy", 4) == 0 ? 4 : 0;
    if (n == 0)
        return 0;
    const char *p = base + n;
    while ((*p >= '0' && *p <= '9') || *p == '.')
        p++;
    if (*p == 't' || *p == 'd')
        p++;
    return *p == '\0';
}

/* CPython's options that take no value, and the ones whose value follows (attached or as the
 * next argument). */
#define PY_FLAGS "bBdEhiIOPqRsSuvVx?"
#define PY_VALUED "WX"

/* The script or module an interpreter's arguments run (argv[0] is the interpreter), or NULL when
 * they run none that can be named (-c, stdin, an option this does not know). */
static const char *python_target(char *const *argv, int argc) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-')
            return a;
        if (strcmp(a, "-") == 0)
            return NULL;
        if (a[1] == '-') { /* long options: only this one takes a value */
            if (strcmp(a, "--check-hash-based-pycs") == 0) {
                i++;
                continue;
            }
            return NULL;
        }
        /* A cluster of short options: "-uB", "-Wignore", "-mpkg.train". */
        for (const char *c = a + 1; *c != '\0'; c++) {
            if (*c == 'm')
                return c[1] != '\0' ? c + 1 : i + 1 < argc ? argv[i + 1] : NULL;
            if (strchr(PY_VALUED, *c) != NULL) {
                if (c[1] == '\0')
                    i++; /* the value is the next argument */
                break;
            }
            if (strchr(PY_FLAGS, *c) == NULL)
                return NULL; /* -c, or an option this does not know */
        }
    }
    return NULL;
}

const char *launch_program_name(const launch_spec_t *spec) {
    if (spec->prog_argc < 1)
        return "";
    const char *prog = spec->prog_argv[0];
    /* ddprun starts Python itself (.py, -m, --run_path): the target is the program. */
    if (spec->module || spec->run_path != NULL || (!spec->no_python && ends_with(prog, ".py")))
        return prog;
    const char *target = is_python(prog) ? python_target(spec->prog_argv, spec->prog_argc) : NULL;
    return target != NULL && *target != '\0' ? target : prog;
}

void launch_argv_free(launch_argv_t *out) {
    if (out == NULL)
        return;
    if (out->argv != NULL)
        for (int i = 0; i < out->argc; i++)
            free(out->argv[i]);
    free(out->argv);
    free(out->path);
    memset(out, 0, sizeof *out);
}

int launch_program_argv(const launch_spec_t *spec, launch_argv_t *out, ddp_err_t *err) {
    memset(out, 0, sizeof *out);
    if (spec->prog_argc < 1 || spec->prog_argv == NULL || spec->prog_argv[0] == NULL)
        return ddp_err_set(err, DDP_EUSAGE, "missing program to run");
    const char *prog = spec->prog_argv[0];
    const char *python = getenv("PYTHON_EXEC");
    if (python == NULL || *python == '\0')
        python = "python3";
    int use_python =
        spec->module || spec->run_path != NULL || (!spec->no_python && ends_with(prog, ".py"));
    int rc;

    /* torchrun: [python, "-u", ("-m"), target, args...] or [target, args...]. */
    int lead = use_python ? (spec->module ? 3 : 2) : 0;
    out->argv = calloc((size_t)(lead + spec->prog_argc + 1), sizeof *out->argv);
    if (out->argv == NULL)
        return -ENOMEM;
    if (use_python) {
        if (!spec->module && (rc = check_file("program", prog, 0, err)) < 0)
            goto fail;
        if ((rc = resolve_exec("python interpreter", python, &out->path, err)) < 0)
            goto fail;
        const char *pre[3] = {python, "-u", "-m"};
        for (int k = 0; k < lead; k++) {
            if ((out->argv[out->argc] = strdup(pre[k])) == NULL)
                goto nomem;
            out->argc++;
        }
    } else if ((rc = resolve_exec("program", prog, &out->path, err)) < 0 ||
               (rc = check_interpreter("program", out->path, err)) < 0) {
        goto fail;
    }
    for (int k = 0; k < spec->prog_argc; k++) {
        if ((out->argv[out->argc] = strdup(spec->prog_argv[k])) == NULL)
            goto nomem;
        out->argc++;
    }
    return 0;
nomem:
    rc = -ENOMEM;
fail:
    launch_argv_free(out);
    return rc;
}
