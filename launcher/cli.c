/* SPDX-License-Identifier: Apache-2.0
 * launch_cli_parse: torchrun's command line (torch/distributed/run.py) into a launch_spec_t.
 * Every flag has a dashed and an underscored spelling, "--flag=value" and "--flag value" forms, a
 * PET_<FLAG> variable (the command line wins), and a unique prefix works as in argparse. Parsing
 * stops at the first argument that is not a flag (the program) or after "--". */
#include "launch_spec.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ddp_contract.h"
#include "ddp_parse.h"
#include "ddp_signal.h"
#include "launch_int.h"
#include "launch_slurm.h"
#include "rdzv_client.h"

/* Values are quoted in messages up to this many characters, so a message fits DDP_ERR_TEXT_LEN. */
#define VQ 48
/* A numeric macro as a string literal, for messages that quote a bound. */
#define LAUNCH_STR_(x) #x
#define LAUNCH_STR(x) LAUNCH_STR_(x)

typedef int (*apply_fn)(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err);

/* How a flag's value is stored: by its own apply function, or straight into one field of
 * launch_spec_t through the shared parser of its type. */
typedef enum opt_kind {
    OPT_FN = 0,  /* apply */
    OPT_SECONDS, /* double: launch__seconds_get */
    OPT_SWITCH,  /* int 0/1: apply_bool (no value on the command line) */
    OPT_COUNT,   /* int 0..INT32_MAX: launch__int_get */
} opt_kind_t;

typedef struct opt {
    launch_opt_t id;
    const char *name; /* canonical dashed spelling without "--" */
    char shortc;      /* -r, -t, -m, -v, -h; 0 when none */
    int takes_value;
    const char *pet; /* PET_* variable, NULL when the flag has none */
    apply_fn apply;  /* OPT_FN; NULL: handled by the parser itself */
    opt_kind_t kind;
    size_t off; /* offsetof the field, for the other kinds */
} opt_t;

/* The end of a table entry: FN(apply_x) for a flag with its own function (FN(NULL): the parser
 * handles it), FIELD(SECONDS, shutdown_timeout) for one stored by its kind's parser. */
#define FN(fn) fn, OPT_FN, 0
#define FIELD(kind, field) NULL, OPT_##kind, OPT_OFF_##kind(field)
/* The field's offset, if its type is the kind's (anything else does not compile). */
#define OPT_OFF_(field, type)                                                                      \
    _Generic(((launch_spec_t *)0)->field, type : offsetof(launch_spec_t, field))
#define OPT_OFF_SECONDS(field) OPT_OFF_(field, double)
#define OPT_OFF_SWITCH(field) OPT_OFF_(field, int)
#define OPT_OFF_COUNT(field) OPT_OFF_(field, int)

/* ---- value parsers ------------------------------------------------------------------------ */

static int apply_nnodes(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    const char *colon = strchr(val, ':');
    int lo = 0, hi = 0;
    if (colon == NULL) {
        if (launch__int_get(flag, val, 1, LAUNCH_MAX_NODES, &lo, err) < 0)
            return DDP_EUSAGE;
        hi = lo;
    } else {
        char buf[32];
        size_t n = (size_t)(colon - val);
        int64_t a, b;
        if (n >= sizeof buf)
            return launch__bad_value(err, flag, val, "is not N or MIN:MAX");
        memcpy(buf, val, n);
        buf[n] = '\0';
        int ra = ddp_parse_i64(buf, 1, LAUNCH_MAX_NODES, &a);
        int rb = ddp_parse_i64(colon + 1, 1, LAUNCH_MAX_NODES, &b);
        if (ra == -EINVAL || rb == -EINVAL)
            return launch__bad_value(err, flag, val, "is not N or MIN:MAX with 1 <= MIN <= MAX");
        if (ra < 0 || rb < 0)
            return launch__bad_value(
                err, flag, val,
                "is out of range (MIN and MAX in 1.." LAUNCH_STR(LAUNCH_MAX_NODES) ")");
        if (a > b)
            return launch__bad_value(err, flag, val, "has MIN above MAX");
        lo = (int)a;
        hi = (int)b;
    }
    spec->min_nodes = lo;
    spec->max_nodes = hi;
    return 0;
}

static int apply_nproc(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    if (strcmp(val, "gpu") == 0)
        spec->nproc_kind = LAUNCH_NPROC_GPU;
    else if (strcmp(val, "cpu") == 0)
        spec->nproc_kind = LAUNCH_NPROC_CPU;
    else if (strcmp(val, "auto") == 0)
        spec->nproc_kind = LAUNCH_NPROC_AUTO;
    else {
        int64_t v;
        int rc = ddp_parse_i64(val, 1, LAUNCH_MAX_NPROC, &v);
        if (rc == -ERANGE)
            return launch__bad_value(err, flag, val,
                                     "is out of range (1.." LAUNCH_STR(LAUNCH_MAX_NPROC) ")");
        if (rc < 0)
            return launch__bad_value(err, flag, val, "is not a number, gpu, cpu or auto");
        spec->nproc_kind = LAUNCH_NPROC_NUM;
        spec->nproc_per_node = (int)v;
        return 0;
    }
    spec->nproc_per_node = 0; /* launch_nproc_resolve fills it */
    return 0;
}

static int apply_node_rank(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__int_get(flag, val, 0, INT32_MAX - 1, &spec->node_rank, err);
}

static int apply_rdzv_backend(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    /* etcd-v2: torchrun's name; ddprun speaks etcd's v3 API for both. */
    if (strcmp(val, "etcd") == 0 || strcmp(val, "etcd-v2") == 0)
        return launch__str_set(&spec->rdzv_backend, "etcd");
    if (strcmp(val, "static") != 0 && strcmp(val, "c10d") != 0)
        return launch__bad_value(err, flag, val,
                                 "is not a rendezvous backend (static, c10d or etcd)");
    return launch__str_set(&spec->rdzv_backend, val);
}

/* Appends one etcd member "host[:port]" to *list as HOST:PORT (2379 when absent). Returns 0, or
 * a negative code with err naming the member. */
static int etcd_member_add(char **list, const char *flag, const char *member, ddp_err_t *err) {
    char *host;
    int port, rc = launch_endpoint_split(flag, member, &host, &port, err);
    if (rc < 0)
        return rc;
    int v6 = strchr(host, ':') != NULL;
    char *more = NULL;
    if (asprintf(&more, "%s%s%s%s%s:%d", *list != NULL ? *list : "", *list != NULL ? "," : "",
                 v6 ? "[" : "", host, v6 ? "]" : "", port > 0 ? port : AGENT_DEFAULT_ETCD_PORT) < 0)
        more = NULL;
    free(host);
    if (more == NULL)
        return -ENOMEM;
    free(*list);
    *list = more;
    return 0;
}

int launch_etcd_members_parse(const char *flag, const char *val, char **out, ddp_err_t *err) {
    size_t n_val = strlen(val);
    *out = NULL;
    if (n_val == 0)
        return launch__bad_value(err, flag, val, "names no member");
    if (val[0] == ',' || val[n_val - 1] == ',' || strstr(val, ",,") != NULL)
        return launch__bad_value(err, flag, val, "has an empty member");
    char *copy = strdup(val), *list = NULL, *save = NULL;
    if (copy == NULL)
        return -ENOMEM;
    int rc = 0, n = 0;
    for (char *m = strtok_r(copy, ",", &save); m != NULL && rc == 0; m = strtok_r(NULL, ",", &save))
        rc = ++n > AGENT_ETCD_MAX_MEMBERS
                 ? launch__bad_value(err, flag, val, "names more etcd members than 16")
                 : etcd_member_add(&list, flag, m, err);
    free(copy);
    if (rc == 0 && list == NULL)
        rc = launch__bad_value(err, flag, val, "names no member");
    if (rc < 0) {
        free(list);
        return rc;
    }
    *out = list;
    return 0;
}

/* "HOST:PORT[,HOST:PORT...]": every member checked; the list as the etcd backend uses it. */
static int etcd_endpoints_parse(launch_spec_t *spec, const char *flag, const char *val,
                                ddp_err_t *err) {
    char *list;
    int rc = launch_etcd_members_parse(flag, val, &list, err);
    if (rc < 0)
        return rc;
    free(spec->etcd_endpoints);
    spec->etcd_endpoints = list;
    return 0;
}

static int apply_rdzv_endpoint(launch_spec_t *spec, const char *flag, const char *val,
                               ddp_err_t *err) {
    if (*val == '\0') { /* torchrun's default is "": not given */
        free(spec->rdzv_host);
        spec->rdzv_host = NULL;
        spec->rdzv_port = -1;
        free(spec->etcd_endpoints);
        spec->etcd_endpoints = NULL;
        return 0;
    }
    if (strchr(val, ',') != NULL) {
        /* Several etcd members: the c10d and static backends refuse the list when they resolve
         * it (one endpoint). */
        int rc = etcd_endpoints_parse(spec, flag, val, err);
        if (rc == 0)
            rc = launch__str_set(&spec->rdzv_host, val);
        spec->rdzv_port = -1;
        return rc;
    }
    char *host;
    int port, rc = launch_endpoint_split(flag, val, &host, &port, err);
    if (rc < 0)
        return rc;
    free(spec->rdzv_host);
    spec->rdzv_host = host;
    spec->rdzv_port = port;
    return etcd_endpoints_parse(spec, flag, val, err);
}

static int apply_rdzv_id(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->rdzv_id, flag, val, err);
}

static int apply_rdzv_conf(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    int rc = launch_rdzv_conf_parse(flag, val, &spec->rdzv_opts, err);
    if (rc < 0)
        return rc;
    return launch__str_set_or_unset(&spec->rdzv_conf, val);
}

static int apply_start_method(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    if (strcmp(val, "spawn") != 0 && strcmp(val, "fork") != 0 && strcmp(val, "forkserver") != 0)
        return launch__bad_value(err, flag, val, "is not spawn, fork or forkserver");
    return launch__str_set(&spec->start_method, val);
}

/* --metrics HOST:PORT ([v6]:PORT): the agent's Prometheus listener. */
static int apply_metrics(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    char *host;
    int port, rc = launch_endpoint_split(flag, val, &host, &port, err);
    if (rc == 0 && port < 0) {
        free(host);
        rc = launch__bad_value(err, flag, val, "is not HOST:PORT");
    }
    if (rc < 0)
        return rc;
    free(spec->metrics_host);
    spec->metrics_host = host;
    spec->metrics_port = port;
    return 0;
}

/* --worker_store agent|own: who serves the store PyTorch workers reach at MASTER_ADDR:PORT. */
static int apply_worker_store(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    if (strcmp(val, "agent") != 0 && strcmp(val, "own") != 0)
        return launch__bad_value(err, flag, val, "is not agent or own");
    spec->worker_store_own = strcmp(val, "own") == 0;
    return 0;
}

static int apply_straggler_threshold(launch_spec_t *spec, const char *flag, const char *val,
                                     ddp_err_t *err) {
    char *end = NULL;
    errno = 0;
    double v = strtod(val, &end);
    if (*val == '\0' || end == NULL || *end != '\0' || errno != 0 ||
        !(v == 0 || (v >= LAUNCH_STRAGGLER_THRESHOLD_MIN && v <= LAUNCH_STRAGGLER_THRESHOLD_MAX)))
        return launch__bad_value(err, flag, val,
                                 "is not 0 (off) or a factor from 1.001 to 1000 (e.g. 1.2)");
    spec->straggler_threshold = v;
    return 0;
}

static int apply_straggler_action(launch_spec_t *spec, const char *flag, const char *val,
                                  ddp_err_t *err) {
    if (strcmp(val, "warn") != 0 && strcmp(val, "exclude") != 0)
        return launch__bad_value(err, flag, val, "is not warn or exclude");
    spec->straggler_exclude = strcmp(val, "exclude") == 0;
    return 0;
}

static int apply_role(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->role, flag, val, err);
}

static int apply_log_dir(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    if (*val == '\0')
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    int rc = launch__log_dir_check(flag, val, err);
    return rc < 0 ? rc : launch__str_set(&spec->log_dir, val);
}

static int apply_redirects(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch_std_map_parse(flag, val, &spec->redirects, err);
}

static int apply_tee(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch_std_map_parse(flag, val, &spec->tee, err);
}

static int apply_ranks_filter(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    int *v, n, rc = launch__ranks_parse(flag, val, &v, &n, err);
    if (rc < 0)
        return rc;
    free(spec->local_ranks_filter);
    spec->local_ranks_filter = v;
    spec->n_local_ranks_filter = n;
    return 0;
}

/* An address as the workers' MASTER_ADDR and the static backend's endpoint: a name or an
 * address, an IPv6 one without brackets as torchrun takes it. */
static int apply_master_addr(launch_spec_t *spec, const char *flag, const char *val,
                             ddp_err_t *err) {
    int rc = launch__host_check(flag, val, val, strlen(val), 1, err);
    return rc < 0 ? rc : launch__str_set_nonempty(&spec->master_addr, flag, val, err);
}

static int apply_master_port(launch_spec_t *spec, const char *flag, const char *val,
                             ddp_err_t *err) {
    return launch__int_get(flag, val, 1, 65535, &spec->master_port, err);
}

static int apply_local_addr(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    int rc = launch__host_check(flag, val, val, strlen(val), 1, err);
    return rc < 0 ? rc : launch__str_set_nonempty(&spec->local_addr, flag, val, err);
}

static int apply_signals(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__signals_parse(flag, val, spec->signals, &spec->n_signals, err);
}

/* torchrun loads the torchrun.logs_specs entry point of that name; the only one torch itself
 * registers is "default" (DefaultLogsSpecs, which ddprun implements). Others are Python plugins. */
static int apply_logs_specs(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    (void)spec;
    if (strcmp(val, "default") == 0)
        return 0;
    return launch__bad_value(
        err, flag, val,
        "is a Python log spec plugin, which ddprun cannot load (only 'default'; "
        "use --log_dir)");
}

static int apply_prefix_template(launch_spec_t *spec, const char *flag, const char *val,
                                 ddp_err_t *err) {
    int rc = agent_prefix_check(flag, val, err);
    if (rc < 0)
        return rc;
    return launch__str_set_or_unset(&spec->log_line_prefix_template, val); /* empty: the default */
}

/* torch.distributed.elastic.events knows two handlers (null, console), accepted; ddprun adds
 * json (stderr) and json:PATH (a file, appended to): structured events, agent/events.c. */
static int apply_event_log_handler(launch_spec_t *spec, const char *flag, const char *val,
                                   ddp_err_t *err) {
    if (strcmp(val, "null") != 0 && strcmp(val, "console") != 0 && strcmp(val, "json") != 0 &&
        (strncmp(val, "json:", 5) != 0 || val[5] == '\0'))
        return launch__bad_value(err, flag, val,
                                 "is not an event log handler (null, console, json or json:PATH)");
    return launch__str_set(&spec->event_log_handler, val);
}

static int apply_dup_stdout(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return launch__filters_parse(flag, val, &spec->dup_stdout_filters, err);
}

static int apply_dup_stderr(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return launch__filters_parse(flag, val, &spec->dup_stderr_filters, err);
}

/* --hostfile FILE: read (and every line checked) by launcher/ssh.c before anything starts. */
static int apply_hostfile(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->hostfile, flag, val, err);
}

static int apply_hosts(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->hosts, flag, val, err);
}

static int apply_include(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->include, flag, val, err);
}

static int apply_exclude(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    return launch__str_set_nonempty(&spec->exclude, flag, val, err);
}

/* --health_check CMD: a shell command line, run by /bin/sh -c on the node. */
static int apply_health_check(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    if (strspn(val, " \t") == strlen(val))
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    return launch__str_set(&spec->health_check, val);
}

/* --ssh CMD: the ssh client and its options, split on spaces when the hosts are started. */
static int apply_ssh(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    if (strspn(val, " \t") == strlen(val))
        return ddp_err_set(err, DDP_EUSAGE, "%s: empty value", flag);
    return launch__str_set(&spec->ssh, val);
}

/* --remote_ddprun PATH: run on the hosts, from the launcher's working directory there; an
 * absolute path, since the remote shell's PATH is not the user's. */
static int apply_remote_ddprun(launch_spec_t *spec, const char *flag, const char *val,
                               ddp_err_t *err) {
    if (val[0] != '/')
        return launch__bad_value(err, flag, val, "is not an absolute path");
    if (strpbrk(val, "\n\r") != NULL)
        return launch__bad_value(err, flag, val, "holds a line break");
    return launch__str_set(&spec->remote_ddprun, val);
}

static int apply_ssh_fanout(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    return launch__int_get(flag, val, 1, 4096, &spec->ssh_fanout, err);
}

/* --ssh_session NAME (set by a launching ddprun on the hosts it starts): NAME tags the host's
 * output, so it is held to a host name's characters. */
static int apply_ssh_session(launch_spec_t *spec, const char *flag, const char *val,
                             ddp_err_t *err) {
    int rc = launch__host_check(flag, val, val, strlen(val), 0, err);
    return rc < 0 ? rc : launch__str_set_nonempty(&spec->ssh_session, flag, val, err);
}

/* -x VAR or -x VAR=VAL (mpirun's): a variable for the hosts' agents, repeatable. The job token's
 * variables are refused: the launcher sends the job's own token on ssh's stdin. */
static int apply_env(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    size_t n = strcspn(val, "=");
    if (n == 0 || !(isalpha((unsigned char)val[0]) || val[0] == '_'))
        return launch__bad_value(err, flag, val, "is not VAR or VAR=VALUE");
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)val[i]) && val[i] != '_')
            return launch__bad_value(err, flag, val, "is not VAR or VAR=VALUE");
    if ((n == strlen(DDP_ENV_TOKEN) && strncmp(val, DDP_ENV_TOKEN, n) == 0) ||
        (n == strlen(DDP_ENV_TOKEN_FILE) && strncmp(val, DDP_ENV_TOKEN_FILE, n) == 0) ||
        (n == strlen(DDP_ENV_STORE_TOKEN) && strncmp(val, DDP_ENV_STORE_TOKEN, n) == 0))
        return ddp_err_set(err, DDP_EUSAGE,
                           "%s: %.*s is the job token's; ddprun gives the hosts the job's own "
                           "token, never in the environment",
                           flag, (int)n, val);
    char **v = realloc(spec->env, (size_t)(spec->n_env + 2) * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    spec->env = v;
    if ((v[spec->n_env] = strdup(val)) == NULL)
        return -ENOMEM;
    v[++spec->n_env] = NULL;
    return 0;
}

static int apply_env_policy(launch_spec_t *spec, const char *flag, const char *val,
                            ddp_err_t *err) {
    if (strcmp(val, "default") != 0 && strcmp(val, "none") != 0)
        return launch__bad_value(err, flag, val, "is not default or none");
    spec->env_policy_none = strcmp(val, "none") == 0;
    return 0;
}

/* Boolean flags: on the command line they take no value; PET_* gives 0/1 (or true/false). */
static int apply_bool(int *dst, const char *flag, const char *val, ddp_err_t *err) {
    if (val == NULL) {
        *dst = 1;
        return 0;
    }
    int b = launch__bool_parse(val);
    if (b < 0)
        return launch__bad_value(err, flag, val, "is not 0 or 1");
    *dst = b;
    return 0;
}

/* torchrun 2.x flags ddprun does not implement: refused by name with what to do instead, rather
 * than as unknown flags, so that a torchrun command line that uses them says why it stops. */
static int apply_numa_binding(launch_spec_t *spec, const char *flag, const char *val,
                              ddp_err_t *err) {
    static const launch_numa_mode_t modes[] = {LAUNCH_NUMA_NODE, LAUNCH_NUMA_SOCKET,
                                               LAUNCH_NUMA_EXCLUSIVE, LAUNCH_NUMA_CORE_COMPLEX};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(val, launch_numa_mode_name(modes[i])) == 0) {
            spec->numa_binding = modes[i];
            return 0;
        }
    return launch__bad_value(err, flag, val, "is not node, socket, exclusive or core-complex");
}

/* --print_completion bash: nothing to run; the caller prints the completion script
 * (launch_completion_bash), which is made from this file's flag table. */
static int apply_print_completion(launch_spec_t *spec, const char *flag, const char *val,
                                  ddp_err_t *err) {
    if (strcmp(val, "bash") != 0)
        return launch__bad_value(err, flag, val, "is not a shell ddprun completes (bash)");
    spec->print_completion = 1;
    spec->info_printed = 1;
    return 0;
}

/* --run_path is a switch in torchrun. While parsing, spec->run_path is "" for "on"; it gets the
 * script's path once the program is known. */
static int apply_run_path(launch_spec_t *spec, const char *flag, const char *val, ddp_err_t *err) {
    int on = 0, rc = apply_bool(&on, flag, val, err);
    if (rc < 0)
        return rc;
    free(spec->run_path);
    spec->run_path = NULL;
    return on ? launch__str_set(&spec->run_path, "") : 0;
}

static const opt_t opts[] = {
    {LAUNCH_OPT_NNODES, "nnodes", 0, 1, "PET_NNODES", FN(apply_nnodes)},
    {LAUNCH_OPT_NPROC_PER_NODE, "nproc-per-node", 0, 1, "PET_NPROC_PER_NODE", FN(apply_nproc)},
    {LAUNCH_OPT_NODE_RANK, "node-rank", 0, 1, "PET_NODE_RANK", FN(apply_node_rank)},
    {LAUNCH_OPT_RDZV_BACKEND, "rdzv-backend", 0, 1, "PET_RDZV_BACKEND", FN(apply_rdzv_backend)},
    {LAUNCH_OPT_RDZV_ENDPOINT, "rdzv-endpoint", 0, 1, "PET_RDZV_ENDPOINT", FN(apply_rdzv_endpoint)},
    {LAUNCH_OPT_RDZV_ID, "rdzv-id", 0, 1, "PET_RDZV_ID", FN(apply_rdzv_id)},
    {LAUNCH_OPT_RDZV_CONF, "rdzv-conf", 0, 1, "PET_RDZV_CONF", FN(apply_rdzv_conf)},
    {LAUNCH_OPT_STANDALONE, "standalone", 0, 0, "PET_STANDALONE", FIELD(SWITCH, standalone)},
    {LAUNCH_OPT_MAX_RESTARTS, "max-restarts", 0, 1, "PET_MAX_RESTARTS", FIELD(COUNT, max_restarts)},
    {LAUNCH_OPT_MAX_NODE_FAILURES, "max-node-failures", 0, 1, "PET_MAX_NODE_FAILURES",
     FIELD(COUNT, max_node_failures)},
    {LAUNCH_OPT_MONITOR_INTERVAL, "monitor-interval", 0, 1, "PET_MONITOR_INTERVAL",
     FIELD(SECONDS, monitor_interval)},
    {LAUNCH_OPT_START_METHOD, "start-method", 0, 1, "PET_START_METHOD", FN(apply_start_method)},
    {LAUNCH_OPT_ROLE, "role", 0, 1, "PET_ROLE", FN(apply_role)},
    {LAUNCH_OPT_LOG_DIR, "log-dir", 0, 1, "PET_LOG_DIR", FN(apply_log_dir)},
    {LAUNCH_OPT_REDIRECTS, "redirects", 'r', 1, "PET_REDIRECTS", FN(apply_redirects)},
    {LAUNCH_OPT_TEE, "tee", 't', 1, "PET_TEE", FN(apply_tee)},
    {LAUNCH_OPT_LOCAL_RANKS_FILTER, "local-ranks-filter", 0, 1, "PET_LOCAL_RANKS_FILTER",
     FN(apply_ranks_filter)},
    {LAUNCH_OPT_TIMESTAMP_OUTPUT, "timestamp-output", 0, 0, "PET_TIMESTAMP_OUTPUT",
     FIELD(SWITCH, timestamp_output)},
    {LAUNCH_OPT_MASTER_ADDR, "master-addr", 0, 1, "PET_MASTER_ADDR", FN(apply_master_addr)},
    {LAUNCH_OPT_MASTER_PORT, "master-port", 0, 1, "PET_MASTER_PORT", FN(apply_master_port)},
    {LAUNCH_OPT_LOCAL_ADDR, "local-addr", 0, 1, "PET_LOCAL_ADDR", FN(apply_local_addr)},
    {LAUNCH_OPT_NO_PYTHON, "no-python", 0, 0, "PET_NO_PYTHON", FIELD(SWITCH, no_python)},
    {LAUNCH_OPT_MODULE, "module", 'm', 0, "PET_MODULE", FIELD(SWITCH, module)},
    {LAUNCH_OPT_RUN_PATH, "run-path", 0, 0, "PET_RUN_PATH", FN(apply_run_path)},
    {LAUNCH_OPT_SIGNALS_TO_HANDLE, "signals-to-handle", 0, 1, "PET_SIGNALS_TO_HANDLE",
     FN(apply_signals)},
    {LAUNCH_OPT_SHUTDOWN_TIMEOUT, "shutdown-timeout", 0, 1, "PET_SHUTDOWN_TIMEOUT",
     FIELD(SECONDS, shutdown_timeout)},
    {LAUNCH_OPT_LOGS_SPECS, "logs-specs", 0, 1, NULL, FN(apply_logs_specs)},
    {LAUNCH_OPT_LOG_LINE_PREFIX_TEMPLATE, "log-line-prefix-template", 0, 1,
     "PET_LOG_LINE_PREFIX_TEMPLATE", FN(apply_prefix_template)},
    {LAUNCH_OPT_EVENT_LOG_HANDLER, "event-log-handler", 0, 1, "PET_EVENT_LOG_HANDLER",
     FN(apply_event_log_handler)},
    {LAUNCH_OPT_DUPLICATE_STDOUT_FILTERS, "duplicate-stdout-filters", 0, 1,
     "PET_DUPLICATE_STDOUT_FILTERS", FN(apply_dup_stdout)},
    {LAUNCH_OPT_DUPLICATE_STDERR_FILTERS, "duplicate-stderr-filters", 0, 1,
     "PET_DUPLICATE_STDERR_FILTERS", FN(apply_dup_stderr)},
    {LAUNCH_OPT_VIRTUAL_LOCAL_RANK, "virtual-local-rank", 0, 0, "PET_VIRTUAL_LOCAL_RANK",
     FIELD(SWITCH, virtual_local_rank)},
    {LAUNCH_OPT_NUMA_BINDING, "numa-binding", 0, 1, "PET_NUMA_BINDING", FN(apply_numa_binding)},
    {LAUNCH_OPT_PRINT_TOPOLOGY, "print-topology", 0, 0, NULL, FIELD(SWITCH, print_topology)},
    {LAUNCH_OPT_JSON, "json", 0, 0, NULL, FIELD(SWITCH, json)},
    {LAUNCH_OPT_NUMA_BINDING_FALLBACK, "numa-binding-fallback", 0, 0, "PET_NUMA_BINDING_FALLBACK",
     FIELD(SWITCH, numa_binding_fallback)},
    {LAUNCH_OPT_PRINT_COMPLETION, "print-completion", 0, 1, NULL, FN(apply_print_completion)},
    {LAUNCH_OPT_HEARTBEAT_TIMEOUT, "heartbeat-timeout", 0, 1, "PET_HEARTBEAT_TIMEOUT",
     FIELD(SECONDS, heartbeat_timeout)},
    {LAUNCH_OPT_INITIAL_HEARTBEAT_TIMEOUT, "initial-heartbeat-timeout", 0, 1,
     "PET_INITIAL_HEARTBEAT_TIMEOUT", FIELD(SECONDS, initial_heartbeat_timeout)},
    {LAUNCH_OPT_HEARTBEAT_ON_OUTPUT, "heartbeat-on-output", 0, 0, "PET_HEARTBEAT_ON_OUTPUT",
     FIELD(SWITCH, heartbeat_on_output)},
    {LAUNCH_OPT_STACKS_TIMEOUT, "stacks-timeout", 0, 1, "PET_STACKS_TIMEOUT",
     FIELD(SECONDS, stacks_timeout)},
    {LAUNCH_OPT_MAX_NO_PROGRESS_RESTARTS, "max-no-progress-restarts", 0, 1,
     "PET_MAX_NO_PROGRESS_RESTARTS", FIELD(COUNT, max_no_progress_restarts)},
    {LAUNCH_OPT_GPU_MEMORY_RECLAIM_TIMEOUT, "gpu-memory-reclaim-timeout", 0, 1,
     "PET_GPU_MEMORY_RECLAIM_TIMEOUT", FIELD(SECONDS, gpu_memory_reclaim_timeout)},
    {LAUNCH_OPT_HEALTH_CHECK, "health-check", 0, 1, "PET_HEALTH_CHECK", FN(apply_health_check)},
    {LAUNCH_OPT_HEALTH_CHECK_TIMEOUT, "health-check-timeout", 0, 1, "PET_HEALTH_CHECK_TIMEOUT",
     FIELD(SECONDS, health_check_timeout)},
    {LAUNCH_OPT_NO_GPU_HEALTH_CHECK, "no-gpu-health-check", 0, 0, "PET_NO_GPU_HEALTH_CHECK",
     FIELD(SWITCH, no_gpu_health_check)},
    {LAUNCH_OPT_WORKER_STORE, "worker-store", 0, 1, "PET_WORKER_STORE", FN(apply_worker_store)},
    {LAUNCH_OPT_METRICS, "metrics", 0, 1, "PET_METRICS", FN(apply_metrics)},
    {LAUNCH_OPT_STRAGGLER_THRESHOLD, "straggler-threshold", 0, 1, "PET_STRAGGLER_THRESHOLD",
     FN(apply_straggler_threshold)},
    {LAUNCH_OPT_STRAGGLER_WINDOWS, "straggler-windows", 0, 1, "PET_STRAGGLER_WINDOWS",
     FIELD(COUNT, straggler_windows)},
    {LAUNCH_OPT_STRAGGLER_WINDOW, "straggler-window", 0, 1, "PET_STRAGGLER_WINDOW",
     FIELD(SECONDS, straggler_window)},
    {LAUNCH_OPT_STRAGGLER_ACTION, "straggler-action", 0, 1, "PET_STRAGGLER_ACTION",
     FN(apply_straggler_action)},
    {LAUNCH_OPT_HOSTFILE, "hostfile", 0, 1, NULL, FN(apply_hostfile)},
    {LAUNCH_OPT_HOSTS, "hosts", 0, 1, NULL, FN(apply_hosts)},
    {LAUNCH_OPT_INCLUDE, "include", 0, 1, NULL, FN(apply_include)},
    {LAUNCH_OPT_EXCLUDE, "exclude", 0, 1, NULL, FN(apply_exclude)},
    {LAUNCH_OPT_SSH, "ssh", 0, 1, "DDPRUN_SSH", FN(apply_ssh)},
    {LAUNCH_OPT_REMOTE_DDPRUN, "remote-ddprun", 0, 1, NULL, FN(apply_remote_ddprun)},
    {LAUNCH_OPT_SSH_FANOUT, "ssh-fanout", 0, 1, NULL, FN(apply_ssh_fanout)},
    {LAUNCH_OPT_SSH_SESSION, "ssh-session", 0, 1, NULL, FN(apply_ssh_session)},
    {LAUNCH_OPT_ENV, "env", 'x', 1, NULL, FN(apply_env)},
    {LAUNCH_OPT_ENV_POLICY, "env-policy", 0, 1, NULL, FN(apply_env_policy)},
    {LAUNCH_OPT_VERBOSE, "verbose", 'v', 0, NULL, FN(NULL)},
    {LAUNCH_OPT_HELP, "help", 'h', 0, NULL, FN(NULL)},
    {LAUNCH_OPT_VERSION, "version", 0, 0, NULL, FN(NULL)},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

size_t launch_cli_flag_count(void) {
    return N_OPTS;
}

int launch_cli_flag(size_t k, const char **name, char *shortc) {
    *name = k < N_OPTS ? opts[k].name : NULL;
    *shortc = k < N_OPTS ? opts[k].shortc : 0;
    return k < N_OPTS && opts[k].takes_value;
}

/* ---- the parser ---------------------------------------------------------------------------- */

static void spec_defaults(launch_spec_t *spec) {
    memset(spec, 0, sizeof *spec);
    spec->min_nodes = spec->max_nodes = 1;
    spec->nproc_kind = LAUNCH_NPROC_NUM;
    spec->nproc_per_node = 1;
    spec->max_restarts = 0;
    spec->monitor_interval = 0.1;
    spec->master_port = -1;
    spec->rdzv_port = -1;
    spec->signals[0] = SIGTERM;
    spec->signals[1] = SIGINT;
    spec->signals[2] = SIGHUP;
    spec->signals[3] = SIGQUIT;
    spec->n_signals = 4;
    spec->shutdown_timeout = 30;
    spec->initial_heartbeat_timeout = -1;
    spec->stacks_timeout = LAUNCH_DEFAULT_STACKS_TIMEOUT_S;
    spec->straggler_threshold = LAUNCH_DEFAULT_STRAGGLER_THRESHOLD;
    spec->straggler_windows = LAUNCH_DEFAULT_STRAGGLER_WINDOWS;
    spec->straggler_window = LAUNCH_DEFAULT_STRAGGLER_WINDOW_S;
    spec->gpu_memory_reclaim_timeout = LAUNCH_DEFAULT_GPU_MEMORY_RECLAIM_TIMEOUT_S;
    spec->health_check_timeout = LAUNCH_DEFAULT_HEALTH_CHECK_TIMEOUT_S;
    spec->ssh_fanout = LAUNCH_DEFAULT_SSH_FANOUT;
    launch__rdzv_conf_defaults(&spec->rdzv_opts);
}

static int default_strings(launch_spec_t *spec) {
    if (spec->rdzv_backend == NULL && launch__str_set(&spec->rdzv_backend, "static") < 0)
        return -ENOMEM;
    if (spec->rdzv_id == NULL && launch__str_set(&spec->rdzv_id, "none") < 0)
        return -ENOMEM;
    if (spec->role == NULL && launch__str_set(&spec->role, "default") < 0)
        return -ENOMEM;
    if (spec->master_addr == NULL && launch__str_set(&spec->master_addr, "127.0.0.1") < 0)
        return -ENOMEM;
    if (spec->start_method == NULL && launch__str_set(&spec->start_method, "spawn") < 0)
        return -ENOMEM;
    if (spec->event_log_handler == NULL && launch__str_set(&spec->event_log_handler, "null") < 0)
        return -ENOMEM;
    return 0;
}

/* Canonical form of a long name for matching: '_' becomes '-'. */
static void canon(const char *s, size_t n, char *out, size_t cap) {
    size_t i;
    for (i = 0; i < n && i + 1 < cap; i++)
        out[i] = s[i] == '_' ? '-' : s[i];
    out[i] = '\0';
}

/* Finds the option for "--name" (n chars, no dashes): exact match first, then a unique prefix
 * (argparse's allow_abbrev). Returns NULL after setting err. */
static const opt_t *find_long(const char *arg, const char *name, size_t n, ddp_err_t *err) {
    char c[64];
    if (n == 0 || n >= sizeof c) {
        ddp_err_set(err, DDP_EUSAGE, "unknown flag '%.*s' (see ddprun --help)", VQ, arg);
        return NULL;
    }
    canon(name, n, c, sizeof c);
    const opt_t *hit = NULL;
    int nhit = 0;
    for (size_t i = 0; i < N_OPTS; i++) {
        if (strcmp(opts[i].name, c) == 0)
            return &opts[i];
        if (strncmp(opts[i].name, c, n) == 0) {
            hit = &opts[i];
            nhit++;
        }
    }
    if (nhit == 1)
        return hit;
    if (nhit > 1)
        ddp_err_set(err, DDP_EUSAGE, "ambiguous flag '--%.*s' (see ddprun --help)", (int)n, name);
    else
        ddp_err_set(err, DDP_EUSAGE, "unknown flag '--%.*s' (see ddprun --help)", (int)n, name);
    return NULL;
}

static const opt_t *find_short(char ch) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (opts[i].shortc == ch)
            return &opts[i];
    return NULL;
}

static void print_version(void) {
    printf("ddprun %s\n", DDPRUN_VERSION);
}

/* Stores one value of option o: through its apply function, or its kind's parser into its field. */
static int opt_store(launch_spec_t *spec, const opt_t *o, const char *flag, const char *val,
                     ddp_err_t *err) {
    void *field = (char *)spec + o->off;
    switch (o->kind) {
    case OPT_SECONDS: return launch__seconds_get(flag, val, field, err);
    case OPT_SWITCH: return apply_bool(field, flag, val, err);
    case OPT_COUNT: return launch__int_get(flag, val, 0, INT32_MAX, field, err);
    case OPT_FN: break;
    }
    return o->apply(spec, flag, val, err);
}

int launch__opt_from_env(launch_spec_t *spec, launch_opt_t id, const char *var, const char *val,
                         ddp_err_t *err) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (opts[i].id == id) {
            int rc = opt_store(spec, &opts[i], var, val, err);
            return rc < 0 ? (err != NULL && err->code == 0 ? ddp_err_set(err, rc, "%s", var) : rc)
                          : 0;
        }
    return ddp_err_set(err, -EINVAL, "no option %d", (int)id);
}

/* Records that argv[first..first+count) gave option id. Returns 0 or -ENOMEM. */
static int arg_record(launch_spec_t *spec, int first, int count, launch_opt_t id) {
    int n = spec->n_args + 1;
    int *f = realloc(spec->arg_first, (size_t)n * sizeof *f);
    if (f != NULL)
        spec->arg_first = f;
    int *c = realloc(spec->arg_count, (size_t)n * sizeof *c);
    if (c != NULL)
        spec->arg_count = c;
    launch_opt_t *d = realloc(spec->arg_id, (size_t)n * sizeof *d);
    if (d != NULL)
        spec->arg_id = d;
    if (f == NULL || c == NULL || d == NULL)
        return -ENOMEM;
    f[n - 1] = first;
    c[n - 1] = count;
    d[n - 1] = id;
    spec->n_args = n;
    return 0;
}

/* Applies one option occurrence. flag is the spelling shown in messages. */
static int apply(launch_spec_t *spec, const opt_t *o, const char *flag, const char *val,
                 ddp_err_t *err) {
    /* For a group of short flags ("-mv") the last one; launcher/ssh.c only needs to know the
     * flags it replaces, which have no short form. */
    spec->last_opt = (int)o->id;
    if (o->id == LAUNCH_OPT_VERBOSE) {
        spec->verbose++;
        return 0;
    }
    int rc = opt_store(spec, o, flag, val, err);
    if (rc < 0)
        return rc;
    LAUNCH_GIVEN_SET(spec, o->id);
    return 0;
}

/* Handles a flag that does its work at once (--help, --version): prints, and marks spec as
 * having nothing to run. Returns 1 when it did. */
static int immediate(launch_spec_t *spec, const opt_t *o) {
    if (o->id == LAUNCH_OPT_HELP)
        launch_usage();
    else if (o->id == LAUNCH_OPT_VERSION)
        print_version();
    else
        return 0;
    spec->info_printed = 1;
    return 1;
}

/* Parses "-r3", "-r 3", "-mv", "-vvv". *i is advanced past consumed arguments. */
static int parse_short(int argc, char *const *argv, int *i, launch_spec_t *spec, ddp_err_t *err) {
    const char *a = argv[*i];
    for (const char *p = a + 1; *p; p++) {
        const opt_t *o = find_short(*p);
        char flag[3] = {'-', *p, '\0'};
        if (o == NULL)
            return ddp_err_set(err, DDP_EUSAGE, "unknown flag '%s' (see ddprun --help)", flag);
        if (immediate(spec, o))
            return 0;
        if (!o->takes_value) {
            int rc = apply(spec, o, flag, NULL, err);
            if (rc < 0)
                return rc;
            continue;
        }
        const char *val = p + 1;
        if (*val == '=')
            val++;
        if (*val == '\0') {
            if (*i + 1 >= argc)
                return ddp_err_set(err, DDP_EUSAGE, "%s: missing value", flag);
            val = argv[++*i];
        }
        return apply(spec, o, flag, val, err);
    }
    return 0;
}

static int parse_long(int argc, char *const *argv, int *i, launch_spec_t *spec, ddp_err_t *err) {
    const char *a = argv[*i];
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const opt_t *o = find_long(a, name, n, err);
    if (o == NULL)
        return DDP_EUSAGE;
    char flag[64];
    snprintf(flag, sizeof flag, "--%.*s", (int)n, name);
    if (!o->takes_value) {
        if (eq != NULL)
            return ddp_err_set(err, DDP_EUSAGE, "%s takes no value", flag);
        if (immediate(spec, o))
            return 0;
        return apply(spec, o, flag, NULL, err);
    }
    const char *val = eq != NULL ? eq + 1 : NULL;
    if (val == NULL) {
        if (*i + 1 >= argc)
            return ddp_err_set(err, DDP_EUSAGE, "%s: missing value", flag);
        val = argv[++*i];
    }
    return apply(spec, o, flag, val, err);
}

/* Fills every option not given on the command line from its PET_* variable. */
static int apply_pet(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx, ddp_err_t *err) {
    for (size_t k = 0; k < N_OPTS; k++) {
        const opt_t *o = &opts[k];
        if (o->pet == NULL || LAUNCH_GIVEN(spec, o->id))
            continue;
        const char *v = getenv_fn(ctx, o->pet);
        if (v == NULL)
            continue;
        int rc = opt_store(spec, o, o->pet, v, err);
        if (rc < 0)
            return rc;
        LAUNCH_GIVEN_SET(spec, o->id);
    }
    return 0;
}

/* torchrun's own variables, read when neither the flag nor its PET_* variable set the value:
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (also when the flag gave ""), and
 * TORCH_ELASTIC_SHUTDOWN_TIMEOUT as the default of --shutdown_timeout. */
static int apply_torch_env(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                           ddp_err_t *err) {
    const char *v = getenv_fn(ctx, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
    int rc;
    if (spec->log_line_prefix_template == NULL && v != NULL &&
        (rc = apply_prefix_template(spec, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", v, err)) < 0)
        return rc;
    v = getenv_fn(ctx, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    if (!LAUNCH_GIVEN(spec, LAUNCH_OPT_SHUTDOWN_TIMEOUT) && v != NULL &&
        (rc = launch__seconds_get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", v, &spec->shutdown_timeout,
                                  err)) < 0)
        return rc;
    return 0;
}

int launch_cli_parse_env(int argc, char *const *argv, launch_getenv_fn getenv_fn, void *ctx,
                         launch_spec_t *spec, ddp_err_t *err) {
    if (getenv_fn == NULL)
        getenv_fn = launch_getenv_process;
    spec_defaults(spec);
    int rc = 0, i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the program */
        int first = i;
        spec->last_opt = -1;
        rc = a[1] == '-' ? parse_long(argc, argv, &i, spec, err)
                         : parse_short(argc, argv, &i, spec, err);
        if (rc < 0 || spec->info_printed)
            goto out;
        if ((rc = arg_record(spec, first, i - first + 1, spec->last_opt)) < 0)
            goto out;
    }
    if ((rc = apply_pet(spec, getenv_fn, ctx, err)) < 0 ||
        (rc = apply_torch_env(spec, getenv_fn, ctx, err)) < 0)
        goto out;
    if (i >= argc && spec->print_topology) {
        rc = default_strings(spec); /* nothing to run: the topology is printed */
        goto out;
    }
    if (i >= argc) {
        rc = ddp_err_set(err, DDP_EUSAGE,
                         "missing program to run (usage: ddprun [flags] program [args...])");
        goto out;
    }
    spec->prog_argv = argv + i;
    spec->prog_argc = argc - i;
    if (spec->run_path != NULL && (rc = launch__str_set(&spec->run_path, argv[i])) < 0)
        goto out;
    if (spec->standalone && (rc = launch__standalone_apply(spec)) < 0)
        goto out;
    if ((rc = launch__check_combinations(spec, getenv_fn, ctx, err)) < 0)
        goto out;
    rc = default_strings(spec);
out:
    if (rc < 0 && err != NULL && err->code == 0)
        ddp_err_set(err, rc, "unable to parse the command line: %s", ddp_strerror(rc));
    if (rc < 0)
        launch_spec_free(spec);
    return rc;
}

int launch_cli_parse(int argc, char *const *argv, launch_spec_t *spec, ddp_err_t *err) {
    return launch_cli_parse_env(argc, argv, NULL, NULL, spec, err);
}

void launch_spec_free(launch_spec_t *spec) {
    if (spec == NULL)
        return;
    for (int i = 0; spec->bind_cpus_text && spec->bind_nodes_text && i < spec->nproc_per_node;
         i++) {
        free(spec->bind_cpus_text[i]);
        free(spec->bind_nodes_text[i]);
    }
    free(spec->metrics_host);
    free(spec->bind_cpus_text);
    free(spec->bind_nodes_text);
    free(spec->bind_cpus);
    free(spec->bind_mems);
    free(spec->rdzv_backend);
    free(spec->rdzv_id);
    free(spec->rdzv_conf);
    free(spec->role);
    free(spec->log_dir);
    free(spec->local_ranks_filter);
    free(spec->master_addr);
    free(spec->local_addr);
    free(spec->run_path);
    free(spec->rdzv_host);
    free(spec->etcd_endpoints);
    free(spec->start_method);
    free(spec->log_line_prefix_template);
    free(spec->event_log_handler);
    launch__filters_free(spec->dup_stdout_filters);
    launch__filters_free(spec->dup_stderr_filters);
    free(spec->hostfile);
    free(spec->hosts);
    free(spec->include);
    free(spec->exclude);
    free(spec->ssh);
    free(spec->health_check);
    free(spec->remote_ddprun);
    free(spec->ssh_session);
    for (int i = 0; spec->env != NULL && i < spec->n_env; i++)
        free(spec->env[i]);
    free(spec->env);
    free(spec->arg_first);
    free(spec->arg_count);
    free(spec->arg_id);
    memset(spec, 0, sizeof *spec);
}
