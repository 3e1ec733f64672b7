/* SPDX-License-Identifier: Apache-2.0
 * ddp_str_escape: text that came from the network or from workers (host names, run ids, error
 * messages), made safe to print on a terminal: control bytes cannot move the cursor, clear the
 * screen, ring the bell or forge a line. */
#ifndef DDP_ESCAPE_H
#define DDP_ESCAPE_H

#include <stddef.h>

/* Writes s[0..len) to out (cap bytes, always NUL-terminated when cap > 0) with:
 *   \a \b \t \n \v \f \r and ESC as \a \b \t \n \v \f \r \e, a backslash as \\ (so the output
 *   reads back unambiguously), every other C0 control byte and DEL as \xNN;
 *   bytes 0x80 and above copied when they form valid UTF-8 other than the C1 controls
 *   (U+0080..U+009F, which some terminals obey), each byte as \xNN otherwise.
 * An escape or a UTF-8 character is never cut in half: when out is too small it ends before the
 * first unit that does not fit. Returns the length the whole escaped text needs (without the NUL),
 * as snprintf does: the output was cut when the return value is >= cap. */
size_t ddp_str_escape(char *out, size_t cap, const char *s, size_t len);

/* ddp_str_escape of the NUL-terminated s (NULL reads as "") into buf; returns buf, for use as a
 * printf argument. Borrowed: valid until buf is reused. */
const char *ddp_str_escaped(const char *s, char *buf, size_t cap);

#endif
