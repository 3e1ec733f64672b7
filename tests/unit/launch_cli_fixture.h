/* SPDX-License-Identifier: Apache-2.0
 * The fixture of the command line's tests (test_launch_cli*.c): "ddprun" + arguments parsed with a
 * recorded environment in place of the process's, and the usage error a bad value must give.
 * Functions are static inline so that a test file that uses only some of them builds without
 * warnings. */
#ifndef LAUNCH_CLI_FIXTURE_H
#define LAUNCH_CLI_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "launch_int.h"
#include "launch_spec.h"

/* The end of a variadic argument list (a typed null pointer, unlike a bare NULL). */
#define END ((const char *)0)

#define MAXARGS 32

/* A recorded environment: "NAME=value" strings, NULL-terminated. */
static inline const char *fake_env(void *ctx, const char *name) {
    size_t n = strlen(name);
    for (const char *const *e = ctx; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static char *argv_buf[MAXARGS];

/* Parses "ddprun" + the NULL-terminated arguments with envp as the whole environment. */
static inline int parse_v(launch_spec_t *s, ddp_err_t *e, const char *const *envp, va_list ap) {
    int argc = 0;
    argv_buf[argc++] = "ddprun";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < MAXARGS - 1)
        argv_buf[argc++] = (char *)a;
    argv_buf[argc] = NULL;
    ddp_err_clear(e);
    return launch_cli_parse_env(argc, argv_buf, fake_env, (void *)envp, s, e);
}

static inline int parse_env(launch_spec_t *s, ddp_err_t *e, const char *const *envp, ...) {
    va_list ap;
    va_start(ap, envp);
    int rc = parse_v(s, e, envp, ap);
    va_end(ap);
    return rc;
}

static inline int parse(launch_spec_t *s, ddp_err_t *e, ...) {
    va_list ap;
    va_start(ap, e);
    int rc = parse_v(s, e, NULL, ap);
    va_end(ap);
    return rc;
}

/* Expects a usage error whose text contains both needles (the flag and the value). */
static inline void expect_bad(const char *flag, const char *val, const char *needle) {
    launch_spec_t s;
    ddp_err_t e;
    int rc = parse(&s, &e, flag, val, "prog", END);
    if (rc != DDP_EUSAGE || strstr(e.text, needle) == NULL)
        print_error("flag %s value '%s': rc %d text '%s' (wanted '%s')\n", flag, val, rc, e.text,
                    needle);
    assert_int_equal(rc, DDP_EUSAGE);
    assert_non_null(strstr(e.text, needle));
    assert_null(s.rdzv_backend); /* the spec is left empty on error */
}

#endif
