/* SPDX-License-Identifier: Apache-2.0
 * ddp_signal: signal names as the command line and the logs spell them ("SIGTERM", "term", "15").
 */
#ifndef DDP_SIGNAL_H
#define DDP_SIGNAL_H

/* Signal number for "SIGTERM", "TERM", "term" or "15" (numbers 1..64 are taken as given).
 * Returns the number, or 0 when name is not a signal. */
int ddp_signal_parse(const char *name);

/* "SIGTERM" for 15, "SIG?" for a number without a name. Static string; never NULL. */
const char *ddp_signal_name(int sig);

#endif
