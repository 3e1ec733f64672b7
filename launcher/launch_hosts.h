/* SPDX-License-Identifier: Apache-2.0
 * The hosts of a job started over ssh (--hostfile, --hosts, --include, --exclude): parsed and
 * checked by launcher/hostfile.c before anything starts; launcher/ssh.c starts one agent on each.
 */
#ifndef LAUNCH_HOSTS_H
#define LAUNCH_HOSTS_H

#include <stddef.h>

#include "ddp_err.h"

/* The longest hostfile read, and the longest line in it: a file past them is not a hostfile. */
#define LAUNCH_HOSTFILE_MAX_BYTES (4 << 20)
#define LAUNCH_HOSTFILE_MAX_LINE 1024

/* One host: its name as the user wrote it (what ssh is given: a host name, an address or an ssh
 * alias) and its slots, the workers it runs (0: --nproc_per_node's). */
typedef struct launch_host {
    char *name;
    int slots;
    int line; /* where it was listed (hostfile line, or position in --hosts), for messages */
} launch_host_t;

/* The job's hosts in the order given: host i gets --node_rank i. */
typedef struct launch_hosts {
    launch_host_t *v;
    size_t n;
} launch_hosts_t;

/* Parses a hostfile's text (len bytes; file names it in messages). Each line, once a '#' comment
 * and surrounding blanks are gone, is empty or one host: "NAME", "NAME:N", or "NAME slots=N"
 * (mpirun and DeepSpeed; mpirun's max_slots=N is accepted and does not change the count). Returns
 * 0 with out filled (free with launch_hosts_free), or DDP_EUSAGE with one line naming file and
 * line: a duplicate host, names compared ignoring case (and the line that listed it first), slots
 * that are not decimal digits, of 0 or above LAUNCH_MAX_NPROC, a name no host has (a leading '-',
 * a character outside letters, digits, '-', '.' and '_'), an unknown word, an over-long line, no
 * host at all; or -ENOMEM. out is zeroed on error. */
int launch_hostfile_parse(const char *file, const char *text, size_t len, launch_hosts_t *out,
                          ddp_err_t *err);

/* Reads path (a regular file, at most LAUNCH_HOSTFILE_MAX_BYTES) and parses it as above. Errors
 * name the flag --hostfile and the path. */
int launch_hostfile_load(const char *path, launch_hosts_t *out, ddp_err_t *err);

/* Parses a --hosts value: "NAME[:N],NAME[:N],..." (horovodrun's -H). Same checks and returns as
 * launch_hostfile_parse, the messages naming flag and the entry's position. */
int launch_hosts_parse(const char *flag, const char *val, launch_hosts_t *out, ddp_err_t *err);

/* Keeps only the hosts named in include, or drops those named in exclude (DeepSpeed's
 * --include/--exclude; names separated by ',' or '@'); NULL = no filter. Every name must be one
 * of the hosts (ignoring case). Returns 0, or DDP_EUSAGE naming the flag (both filters given, an
 * unknown name, a per-slot filter "NAME:0,1", no host left); h is unchanged on error. */
int launch_hosts_filter(launch_hosts_t *h, const char *include, const char *exclude,
                        ddp_err_t *err);

/* Checks --nnodes against the n hosts that src (the flag, for messages) gives, each of which runs
 * one agent: not given (given = 0), or n, or MIN:MAX with MIN <= n <= MAX (the job goes on with
 * at least MIN of them). Sets *min_out and *max_out to the node counts the agents are given: n:n,
 * or MIN:n (no agent other than the listed hosts' can join). Returns 0, or DDP_EUSAGE naming
 * --nnodes. */
int launch_hosts_nnodes(size_t n, const char *src, int given, int min, int max, int *min_out,
                        int *max_out, ddp_err_t *err);

/* Frees h's names and vector; h is left zeroed. NULL-safe. */
void launch_hosts_free(launch_hosts_t *h);

#endif
