/* SPDX-License-Identifier: Apache-2.0
 * Internals of the launcher module shared between its files and its unit tests. */
#ifndef LAUNCH_INT_H
#define LAUNCH_INT_H

#include <stdint.h>

#include "launch_spec.h"

/* Makes launch_gpu_count dlopen soname instead of "libcuda.so.1" (NULL restores it). Tests point it
 * at a fake driver or at a missing file. Not thread-safe; call before counting. */
void launch__nproc_set_cuda_lib(const char *soname);

/* The PCI bus ids of the visible CUDA devices, in CUDA's order (CUDA_VISIBLE_DEVICES honoured),
 * at most max, through the driver API. Returns the count (0: none, why says why) or -1 (why). */
int launch_gpu_pci_ids(char (*ids)[32], int max, char *why, size_t why_len);

/* Sets option id from an environment variable's value, as its flag would (the value checked the
 * same way; errors name var). Not marked given: derivations fill what the user left unset. */
int launch__opt_from_env(launch_spec_t *spec, launch_opt_t id, const char *var, const char *val,
                         ddp_err_t *err);

/* env.c: fn(ctx, name) when the variable is set and not empty, else NULL: how the Slurm and
 * Kubernetes derivations read their variables (an empty one is no value). */
const char *launch__env(launch_getenv_fn fn, void *ctx, const char *name);

/* env.c: nonzero when launch_k8s_derive will set nnodes (a non-elastic PyTorchJob's pod:
 * KUBERNETES_SERVICE_HOST, MASTER_ADDR, WORLD_SIZE and RANK set): the parser then leaves the node
 * rank's range to it. getenv_fn NULL: the process's environment. */
int launch__k8s_sets_nnodes(launch_getenv_fn getenv_fn, void *ctx);

/* The flag table (cli.c), for the completion script: how many flags, and flag k's dashed name
 * (without "--") and short letter (0: none). Returns 1 when it takes a value. */
size_t launch_cli_flag_count(void);
int launch_cli_flag(size_t k, const char **name, char *shortc);

/* The values completion offers after flag (dashed name): words separated by spaces, "@dir" for
 * a directory, NULL for none (completion.c). */
const char *launch_completion_values(const char *flag);

/* Writes the bash completion script of `ddprun --print_completion bash` to out (main.c, once the
 * parser has set spec->print_completion: completion.c reads the flag table, never the reverse). */
void launch_completion_bash(FILE *out);

/* cli.c: --rdzv_endpoint as etcd members "HOST[:PORT][,...]" (at most 16): *out = "HOST:PORT,..."
 * with each port (2379 when absent), caller frees. Returns 0, or a negative code with err naming
 * what is wrong. */
int launch_etcd_members_parse(const char *flag, const char *val, char **out, ddp_err_t *err);

/* status_etcd.c: the store etcd elected for `ddprun status --rdzv_backend=etcd`: reads
 * <conf->etcd_prefix>/<run_id>/leader from the members (credentials from DDPRUN_ETCD_USER and
 * DDPRUN_ETCD_PASSWORD), each call bounded by timeout_ms. Returns 0 with *host (caller frees),
 * *port and through (the etcd endpoint that answered, cap bytes) set, or 1 after printing one
 * line on stderr: etcd unreachable, no leader, a value that is not an address. */
int launch_status_etcd_store(const char *members, const launch_rdzv_conf_t *conf,
                             const char *run_id, int timeout_ms, char **host, int *port,
                             char *through, size_t cap);

/* cli_values.c: the value parsers of the option table. Each returns 0, DDP_EUSAGE with a one-line
 * message naming flag (and quoting the value), or -ENOMEM; outputs are untouched on error. */

/* Records "<flag>: '<val>' <what>" in err. Returns DDP_EUSAGE. */
int launch__bad_value(ddp_err_t *err, const char *flag, const char *val, const char *what);
/* Replaces *dst with a copy of val; the old string is freed only once the copy exists.
 * Returns 0, or -ENOMEM with *dst unchanged. */
int launch__str_set(char **dst, const char *val);
/* launch__str_set, refusing an empty value. */
int launch__str_set_nonempty(char **dst, const char *flag, const char *val, ddp_err_t *err);
/* *dst = a copy of val, or NULL (the default) when val is empty. Returns 0 or -ENOMEM. */
int launch__str_set_or_unset(char **dst, const char *val);
/* An integer in min..max into *out. */
int launch__int_get(const char *flag, const char *val, int64_t min, int64_t max, int *out,
                    ddp_err_t *err);
/* The longest host name a flag may give (DNS's limit). */
#define LAUNCH_HOST_MAX 253
/* Checks host[0..n) as a host name or address (v6: an IPv6 address is allowed) and its length.
 * val is the flag's whole value, quoted (escaped) in the message. */
int launch__host_check(const char *flag, const char *val, const char *host, size_t n, int v6,
                       ddp_err_t *err);
/* A number of seconds in LAUNCH_DURATION_MIN_S..LAUNCH_DURATION_MAX_S into *out. */
int launch__seconds_get(const char *flag, const char *val, double *out, ddp_err_t *err);
/* A decimal number of seconds ("30", "0.5", "1e3"; no hex, inf or nan) in min..max into *out.
 * Returns 0, -EINVAL (not such a number) or -ERANGE (outside min..max); *out untouched then. */
int launch__seconds_parse(const char *val, double min, double max, double *out);
/* 1 for 1/true/t/yes/y/on, 0 for 0/false/f/no/n/off (any case), -1 otherwise. */
int launch__bool_parse(const char *v);
/* torchrun's --rdzv_conf defaults. */
void launch__rdzv_conf_defaults(launch_rdzv_conf_t *c);
/* A --log_dir must be a writable directory, or creatable under its nearest existing parent. */
int launch__log_dir_check(const char *flag, const char *val, ddp_err_t *err);
/* "0,2,2" -> *out = {0, 2} (sorted, unique; caller frees), *n = 2; "" -> NULL, 0. */
int launch__ranks_parse(const char *flag, const char *val, int **out, int *n, ddp_err_t *err);
/* "TERM,SIGUSR1,2" -> out[0..*n) (at most AGENT_MAX_SIGNALS, no repeats, not KILL or STOP). */
int launch__signals_parse(const char *flag, const char *val, int *out, int *n, ddp_err_t *err);
/* "a,b,,c" -> {"a", "b,c", NULL} as torchrun's comma_separated_list; replaces *out (NULL when
 * nothing is left). Free with launch__filters_free. */
int launch__filters_parse(const char *flag, const char *val, char ***out, ddp_err_t *err);
/* Frees a NULL-terminated filter list. NULL-safe. */
void launch__filters_free(char **v);

/* cli_rules.c: the checks that need several flags at once (one line naming the flag; DDP_EUSAGE).
 * getenv_fn/ctx: to tell whether Slurm or Kubernetes may still set the node count. */
int launch__check_combinations(launch_spec_t *spec, launch_getenv_fn getenv_fn, void *ctx,
                               ddp_err_t *err);
/* cli_rules.c: --standalone: one node hosting its own c10d store on a free local port, under a
 * random run id (torchrun's rules). Returns 0 or -ENOMEM. */
int launch__standalone_apply(launch_spec_t *spec);

#endif
