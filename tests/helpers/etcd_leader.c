/* SPDX-License-Identifier: Apache-2.0
 * etcd_leader: one candidate (or observer) of an rdzv_etcd_leader election, for
 * tests/integration/test_etcd_leader.sh.
 *   etcd_leader [--endpoints LIST] [--timeout MS] --key KEY --ttl S [--value V | --observer]
 * Prints one line per report on stdout, each starting with CLOCK_MONOTONIC in milliseconds (one
 * clock for every process of the machine, so that the suite can order their lines):
 *   T LEADING rev=R value=V | T OBSERVED rev=R value=V | T NONE | T ERROR why
 *   T LOST rev=R end=E why     (E: when the leadership or lease ended, same clock)
 *   T RESIGNED rev=R | T CHECK leading=0|1 | T FENCED ok rev=R | T FENCED refused rev=R: why
 *   T CLOSED
 * Signals: SIGUSR1 resigns (goes on observing), SIGUSR2 asks rdzv_etcd_leader_leading, then
 * writes KEY/fenced with the revision it last led under (fenced on it), SIGTERM closes (deleting
 * the key if ours, revoking the lease) and exits 0. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "ddp_err.h"
#include "ddp_parse.h"
#include "rdzv_etcd.h"
#include "rdzv_etcd_leader.h"

static uv_loop_t *loop;
static rdzv_etcd_t *client;
static rdzv_etcd_leader_t *leader;
static const char *key;
static int64_t led_rev, leading_rev;
static uv_signal_t sig_usr1, sig_usr2, sig_term;

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* uv_now's milliseconds on the CLOCK_MONOTONIC scale of mono_ms. */
static int64_t loop_to_mono(uint64_t t) {
    uv_update_time(loop);
    return mono_ms() - ((int64_t)uv_now(loop) - (int64_t)t);
}

static void on_report(void *arg, rdzv_leader_event_t ev, const uint8_t *value, size_t value_len,
                      int64_t rev, const char *why) {
    (void)arg;
    int64_t now = mono_ms();
    switch (ev) {
    case RDZV_LEADER_LEADING:
        led_rev = leading_rev = rev;
        printf("%" PRId64 " LEADING rev=%" PRId64 " value=%.*s\n", now, rev, (int)value_len,
               (const char *)value);
        break;
    case RDZV_LEADER_OBSERVED:
        printf("%" PRId64 " OBSERVED rev=%" PRId64 " value=%.*s\n", now, rev, (int)value_len,
               (const char *)value);
        break;
    case RDZV_LEADER_NONE: printf("%" PRId64 " NONE\n", now); break;
    case RDZV_LEADER_LOST: {
        /* Leadership ends at the lease's deadline or now, whichever came first. */
        int64_t end = rev != 0 ? loop_to_mono(rdzv_etcd_leader_deadline(leader)) : now;
        if (end > now)
            end = now;
        leading_rev = 0;
        printf("%" PRId64 " LOST rev=%" PRId64 " end=%" PRId64 " %s\n", now, rev, end, why);
        break;
    }
    case RDZV_LEADER_ERROR: printf("%" PRId64 " ERROR %s\n", now, why); break;
    }
    fflush(stdout);
}

static void on_fenced(void *arg, int st, const rdzv_etcd_result_t *res, const char *why) {
    (void)arg, (void)res;
    if (st == 0)
        printf("%" PRId64 " FENCED ok rev=%" PRId64 "\n", mono_ms(), led_rev);
    else
        printf("%" PRId64 " FENCED %s rev=%" PRId64 ": %s\n", mono_ms(),
               st == DDP_EFENCED ? "refused" : "error", led_rev, why);
    fflush(stdout);
}

static void on_closed(void *arg) {
    (void)arg;
    printf("%" PRId64 " CLOSED\n", mono_ms());
    fflush(stdout);
    rdzv_etcd_close(client, NULL, NULL);
    uv_close((uv_handle_t *)&sig_usr1, NULL);
    uv_close((uv_handle_t *)&sig_usr2, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
    (void)h;
    if (signum == SIGUSR1 || signum == SIGTERM) {
        if (leading_rev != 0)
            printf("%" PRId64 " RESIGNED rev=%" PRId64 "\n", mono_ms(), leading_rev);
        leading_rev = 0;
        fflush(stdout);
    }
    if (signum == SIGUSR1) {
        rdzv_etcd_leader_resign(leader);
    } else if (signum == SIGUSR2) {
        printf("%" PRId64 " CHECK leading=%d\n", mono_ms(), rdzv_etcd_leader_leading(leader));
        char fkey[512];
        snprintf(fkey, sizeof fkey, "%s/fenced", key);
        ddp_err_t err = {0};
        if (rdzv_etcd_fenced_put(client, key, strlen(key), led_rev > 0 ? led_rev : 1, fkey,
                                 strlen(fkey), "x", 1, 0, on_fenced, NULL, &err) != 0)
            printf("%" PRId64 " FENCED error: %s\n", mono_ms(), err.text);
        fflush(stdout);
    } else {
        rdzv_etcd_leader_close(leader, on_closed, NULL);
        leader = NULL;
    }
}

static int usage(void) {
    fprintf(stderr, "usage: etcd_leader [--endpoints LIST] [--timeout MS] --key KEY --ttl S"
                    " [--value V | --observer]\n");
    return 2;
}

int main(int argc, char **argv) {
    rdzv_etcd_opts_t opts = {.endpoints = "127.0.0.1:2379"};
    rdzv_etcd_leader_opts_t lo = {.ttl_s = 2, .cb = on_report};
    const char *value = "candidate";
    int observer = 0;
    for (int i = 1; i < argc; i++) {
        int64_t v;
        if (!strcmp(argv[i], "--observer")) {
            observer = 1;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        if (!strcmp(argv[i], "--endpoints"))
            opts.endpoints = argv[i + 1];
        else if (!strcmp(argv[i], "--timeout") && ddp_parse_i64(argv[i + 1], 1, 600000, &v) == 0)
            opts.timeout_ms = (int)v;
        else if (!strcmp(argv[i], "--key"))
            key = argv[i + 1];
        else if (!strcmp(argv[i], "--value"))
            value = argv[i + 1];
        else if (!strcmp(argv[i], "--ttl") && ddp_parse_i64(argv[i + 1], 1, 3600, &v) == 0)
            lo.ttl_s = (int)v;
        else
            return usage();
        i++;
    }
    if (key == NULL)
        return usage();
    loop = uv_default_loop();
    ddp_err_t err = {0};
    if (rdzv_etcd_new(loop, &opts, &client, &err) != 0) {
        fprintf(stderr, "etcd_leader: %s\n", err.text);
        return 1;
    }
    lo.key = key;
    lo.key_len = strlen(key);
    lo.value = observer ? NULL : value;
    lo.value_len = observer ? 0 : strlen(value);
    if (rdzv_etcd_leader_start(client, &lo, &leader, &err) != 0) {
        fprintf(stderr, "etcd_leader: %s\n", err.text);
        return 1;
    }
    uv_signal_init(loop, &sig_usr1);
    uv_signal_init(loop, &sig_usr2);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_usr1, on_signal, SIGUSR1);
    uv_signal_start(&sig_usr2, on_signal, SIGUSR2);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    printf("%" PRId64 " STARTED\n", mono_ms());
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
