/* SPDX-License-Identifier: Apache-2.0
 * `ddprun status` (launcher/status.c). */
#ifndef LAUNCH_STATUS_H
#define LAUNCH_STATUS_H

/* Runs `ddprun status ARGS` (argv[0] is "status"). Returns the exit code: 0, 1 (the store could
 * not be asked or does not know the run; one line says why), 2 (usage). */
int launch_status_main(int argc, char **argv);

/* The flags of `ddprun status`, dashed ("--rdzv-endpoint"; underscores work too), with whether
 * each takes a value: the parser's list, and the completion script's. NULL name ends it. */
typedef struct launch_status_flag {
    const char *name;
    int takes_value;
} launch_status_flag_t;
extern const launch_status_flag_t launch_status_flags[];

#endif
