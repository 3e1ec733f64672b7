/* SPDX-License-Identifier: Apache-2.0
 * ddp_signal: signal names as the command line and the logs spell them ("SIGTERM", "term", "15"),
 * and the signal state a freshly forked child starts from.
 */
#ifndef DDP_SIGNAL_H
#define DDP_SIGNAL_H

/* Signal number for "SIGTERM", "TERM", "term" or "15" (numbers 1..64 are taken as given).
 * Returns the number, or 0 when name is not a signal. */
int ddp_signal_parse(const char *name);

/* "SIGTERM" for 15, "SIG?" for a number without a name. Static string; never NULL. */
const char *ddp_signal_name(int sig);

/* In a child between fork and exec: every signal's disposition back to SIG_DFL (the parent's
 * handlers, libuv's among them, must not run there, and a signal the parent ignores, SIGPIPE,
 * must not stay ignored in the program) and, when unblock is set, an empty signal mask (a
 * caller whose other steps must run with signals blocked passes 0 and clears the mask itself
 * just before exec). Async-signal-safe. */
void ddp_signals_default(int unblock);

#endif
