/* `ddprun status` (launcher/status.c). */
#ifndef LAUNCH_STATUS_H
#define LAUNCH_STATUS_H

/* Runs `ddprun status ARGS` (argv[0] is "status"). Returns the exit code: 0, 1 (the store could
 * not be asked or does not know the run; one line says why), 2 (usage). */
int launch_status_main(int argc, char **argv);

#endif
