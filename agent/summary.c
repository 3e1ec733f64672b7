/* SPDX-License-Identifier: Apache-2.0
 * The failure summary, in torchrun's layout so people and log scrapers recognise it: the root
 * cause (first failure of the last attempt) and the other failures, each with time, host, ranks,
 * pid, exit code or signal name and the worker's own error file (PyTorch's JSON, via jansson). On
 * several nodes the store decides the root cause (the first FAIL of the round): a node whose
 * failures came after another's lists them all and names that one instead. Its last line is
 * goodput's (goodput.c). */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp_buf.h"
#include "ddp_escape.h"
#include "ddp_signal.h"
#include "stacks.h"

char *agent__error_file_message(const char *path, char **timestamp_out, char *bad, size_t bad_cap) {
    if (timestamp_out)
        *timestamp_out = NULL;
    if (bad != NULL && bad_cap > 0)
        bad[0] = '\0';
    /* Opened once, not followed through a symlink, never blocking: the worker chose what is at
     * this path, and a FIFO there must not stall the summary (nor a link show another file). */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : 0;
        if (fd >= 0)
            close(fd);
        if (e != ENOENT && bad != NULL)
            snprintf(bad, bad_cap, "unable to read it: %s",
                     e == ELOOP ? "a symbolic link"
                     : e != 0   ? strerror(e)
                                : "not a regular file");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadfd(fd, 0, &jerr);
    close(fd);
    if (root == NULL) {
        if (bad != NULL)
            snprintf(bad, bad_cap, "not valid JSON (line %d, column %d: %s)", jerr.line,
                     jerr.column, jerr.text);
        return NULL;
    }
    /* PyTorch writes {"message": {"message": M, "extraInfo": {"py_callstack": S,
     * "timestamp": T}}}; older writers put a plain string in "message". */
    char *out = NULL;
    json_t *msg = json_object_get(root, "message");
    if (json_is_string(msg)) {
        out = strdup(json_string_value(msg));
    } else if (json_is_object(msg)) {
        json_t *text = json_object_get(msg, "message");
        json_t *extra = json_object_get(msg, "extraInfo");
        json_t *stack = json_object_get(extra, "py_callstack");
        json_t *ts = json_object_get(extra, "timestamp");
        ddp_buf_t b = DDP_BUF_INIT;
        if (json_is_string(stack) && json_string_length(stack) > 0)
            ddp_buf_printf(&b, "%s", json_string_value(stack));
        else if (json_is_string(text))
            ddp_buf_printf(&b, "%s", json_string_value(text));
        out = b.data ? (char *)b.data : strdup("");
        if (timestamp_out && json_is_string(ts))
            *timestamp_out = strdup(json_string_value(ts));
    }
    json_decref(root);
    if (out == NULL && bad != NULL)
        snprintf(bad, bad_cap, "no \"message\" string or object in it");
    return out;
}

/* Indents every line after the first so a multi-line traceback stays inside its entry. The text
 * is the worker's: its control bytes (ESC, CR, BEL...) are printed as escapes, so that an error
 * message cannot clear or rewrite the operator's screen; only its line breaks are kept. */
static void print_indented(FILE *f, const char *text) {
    char esc[4 * 256 + 16];
    if (*text == '\0')
        fputc('\n', f);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        /* A line longer than esc goes out in pieces, each escaped whole. */
        for (size_t off = 0, chunk; off < n; off += chunk) {
            chunk = n - off < 256 ? n - off : 256;
            ddp_str_escape(esc, sizeof esc, p + off, chunk);
            fputs(esc, f);
        }
        fputc('\n', f);
        if (nl == NULL || nl[1] == '\0')
            break;
        fputs("              ", f);
        p = nl + 1;
    }
}

/* The error_file line. Without --log_dir the file is in the private run directory, which goes
 * away when ddprun exits: the summary quotes it, and says so rather than show a path to nothing. */
static void print_error_file(const agent_t *a, FILE *f, const char *path) {
    size_t n = strlen(a->cfg.run_dir);
    int removed = a->cfg.run_dir_is_temp && !a->cfg.log_layout && !a->hang.stacks_kept &&
                  strncmp(path, a->cfg.run_dir, n) == 0 && path[n] == '/';
    fprintf(f, "  error_file: %s%s\n", path,
            removed ? " (removed at exit: --log_dir keeps it)" : "");
}

/* A hung worker: no exit code; the root cause is its silence, with its stacks quoted. */
static void print_hang(FILE *f, const agent_failure_t *x) {
    fprintf(f, "  exitcode  : hung (pid: %d)\n", (int)x->pid);
    fputs("  error_file: <N/A>\n", f);
    char text[96];
    agent__hang_text(x, text, sizeof text);
    fprintf(f, "  traceback : %s\n", text);
    if (x->stacks_file[0] == '\0') {
        fputs("  stacks    : <none captured>\n", f);
        return;
    }
    fprintf(f, "  stacks    : %s\n", x->stacks_file);
    char head[8192];
    if (agent__stacks_head(x->stacks_file, AGENT_STACKS_SUMMARY_LINES, head, sizeof head) > 0) {
        fputs("              ", f);
        print_indented(f, head);
    }
}

static void print_failure(agent_t *a, FILE *f, int idx, const agent_failure_t *x) {
    char when[64];
    struct tm tm;
    localtime_r(&x->when, &tm);
    strftime(when, sizeof when, "%Y-%m-%d_%H:%M:%S", &tm);
    fprintf(f, "[%d]:\n", idx);
    fprintf(f, "  time      : %s\n", when);
    fprintf(f, "  host      : %s\n", a->cfg.hostname);
    fprintf(f, "  rank      : %d (local_rank: %d)\n", x->rank, x->local_rank);
    if (x->hung) {
        print_hang(f, x);
        return;
    }
    char *ts = NULL, bad[256];
    char *msg = agent__error_file_message(x->error_file, &ts, bad, sizeof bad);
    /* The file was there but says nothing usable: name it and why, not "no error file". */
    const char *shown = msg != NULL || bad[0] != '\0' ? x->error_file : "<N/A>";
    if (WIFSIGNALED(x->status)) {
        int sig = WTERMSIG(x->status);
        fprintf(f, "  exitcode  : -%d (pid: %d)\n", sig, (int)x->pid);
        print_error_file(a, f, shown);
        fprintf(f, "  traceback : Signal %d (%s) received by PID %d\n", sig, ddp_signal_name(sig),
                (int)x->pid);
    } else {
        int code = WEXITSTATUS(x->status);
        fprintf(f, "  exitcode  : %d (pid: %d)\n", code, (int)x->pid);
        print_error_file(a, f, shown);
        if (x->exec_errno != 0)
            fprintf(f, "  traceback : unable to exec %s: %s\n", a->cfg.job->path,
                    strerror(x->exec_errno));
        else if (msg) {
            fputs("  traceback : ", f);
            print_indented(f, msg);
        } else if (bad[0] != '\0') {
            fputs("  traceback : its error file is ", f);
            print_indented(f, bad);
        } else {
            fputs("  traceback : the worker wrote no error file; its own output is above\n", f);
        }
    }
    free(msg);
    free(ts);
}

void agent__summary_print(agent_t *a) {
    /* Made in memory, then written to stderr through the console in one piece. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        f = stderr;
    const char *sep = "============================================================";
    const char *thin = "------------------------------------------------------------";
    const char *prog = a->cfg.job->prog_name;
    /* Several nodes: the root cause is the store's to decide (the first FAIL of the round), so
     * that a job names one, the same on every node, however many failed together. */
    const char *store_says = "";
    int here = a->cfg.ops->root_cause(a, &store_says);
    int first = here ? 1 : 0;
    fprintf(f, "%s\n%s FAILED\n%s\nFailures:\n", sep, prog, thin);
    if (a->grp.nfailures <= first)
        fputs("  <NO_OTHER_FAILURES>\n", f);
    for (int i = first; i < a->grp.nfailures; i++)
        print_failure(a, f, i, &a->grp.failures[i]);
    if (here) {
        fprintf(f, "%s\n" AGENT_ROOT_CAUSE_TITLE "\n", thin);
        if (a->grp.nfailures > 0)
            print_failure(a, f, 0, &a->grp.failures[0]);
    } else {
        fprintf(f, "%s\n" AGENT_ROOT_CAUSE_TITLE " on another node\n  %s\n", thin,
                store_says[0] != '\0' ? store_says
                                      : "(the rendezvous store counted another node's failure "
                                        "of this round first)");
    }
    if (a->sup.no_progress_stop)
        fprintf(f,
                "%s\nNot restarted: %d attempt(s) in a row made no progress past step %lld\n"
                "(--max_no_progress_restarts=%d)\n",
                thin, a->hang.no_progress, a->hang.best_step, a->cfg.job->max_no_progress_restarts);
    else if (a->hang.stacks_kept)
        fprintf(f, "%s\nStacks of the hung workers are kept in %s\n", thin, a->cfg.run_dir);
    char gp[512];
    agent__goodput_text(a, gp, sizeof gp);
    fprintf(f, "%s\n%s\n%s\n", thin, gp, sep);
    if (f == stderr) {
        fflush(f);
        return;
    }
    fclose(f);
    agent__console_write(a, 2, text, len, 1);
    free(text);
}
