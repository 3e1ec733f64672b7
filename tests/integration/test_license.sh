#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The license (Apache-2.0): LICENSE is its full text, and every source file names it in its first
# comment (scripts/check-license.sh, which make lint runs too). The check is proved on files made
# here: it names those without the line in their first comment, a new file in a clone among them,
# and --fix gives it to them.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$SRC/scripts/check-license.sh
SPDX='SPDX-License-Identifier: Apache-2.0'

if [ -f /usr/share/common-licenses/Apache-2.0 ]; then
    check "LICENSE is the Apache License 2.0's full text (Debian's common-licenses copy)" \
        cmp -s "$SRC/LICENSE" /usr/share/common-licenses/Apache-2.0
else
    skip "LICENSE is the Apache License 2.0's full text (Debian's common-licenses copy)" \
        "/usr/share/common-licenses/Apache-2.0 is missing"
fi

"$CHECK" >"$TMP/tree.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ ! -s "$TMP/tree.out" ]
verdict "every source file of the tree has '$SPDX' in its first comment (rc $rc)" ||
    head -10 "$TMP/tree.out" | sed 's/^/# /'

# Files that carry the line where it counts, and files that do not.
D=$TMP/files
mkdir -p "$D"
printf '/* %s\n * what it does */\nint x;\n' "$SPDX" >"$D/good.c"
printf '// %s\nint y;\n' "$SPDX" >"$D/good.cu"
printf '#!/bin/sh\n# %s\n# what it does\ntrue\n' "$SPDX" >"$D/good.sh"
printf '# %s\n"""what it does"""\n' "$SPDX" >"$D/good.py"
printf '\n# %s\nall:\n' "$SPDX" >"$D/Makefile"
printf '#!/usr/bin/env python3\n# %s\n' "$SPDX" >"$D/tool"
printf '/* what it does */\nint x; /* %s */\n' "$SPDX" >"$D/late.c"
printf '#include <stdio.h>\n' >"$D/bare.h"
printf '"""what it does"""\n# %s\n' "$SPDX" >"$D/docstring_first.py"
printf '#!/bin/sh\ntrue\n# %s\n' "$SPDX" >"$D/code_first.sh"
printf '# what it does\n\n# %s\nx:\n' "$SPDX" >"$D/second_comment.mk"
printf '#!/bin/bash\necho\n' >"$D/script" && chmod 755 "$D/script"
printf 'not source\n' >"$D/notes.txt"
(cd "$D" && "$CHECK" good.c good.cu good.sh good.py Makefile tool notes.txt) >"$TMP/good.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ ! -s "$TMP/good.out" ]
verdict "the line in the first comment (after #!, in /* */, // or # lines) passes (rc $rc)" ||
    sed 's/^/# /' "$TMP/good.out"
(cd "$D" && "$CHECK" late.c bare.h docstring_first.py code_first.sh second_comment.mk script) \
    >"$TMP/bad.out" 2>&1
rc=$?
named=$(sed -n "s/: no '$SPDX' in its first comment$//p" "$TMP/bad.out" | sort | tr '\n' ' ')
[ $rc -eq 1 ] && [ "$named" = "bare.h code_first.sh docstring_first.py late.c script second_comment.mk " ]
verdict "files without it in their first comment are each named, exit 1 (rc $rc: $named)"

# --fix writes the line into those files; they then pass and still parse as before.
(cd "$D" && "$CHECK" --fix late.c bare.h docstring_first.py code_first.sh second_comment.mk script) \
    >"$TMP/fix.out" 2>&1
rc=$?
(cd "$D" && "$CHECK" late.c bare.h docstring_first.py code_first.sh second_comment.mk script) \
    >"$TMP/fixed.out" 2>&1
rc2=$?
[ $rc -eq 0 ] && [ "$(grep -c "added$" "$TMP/fix.out")" = 6 ] && [ $rc2 -eq 0 ] &&
    [ "$(head -2 "$D/late.c")" = "$(printf '/* %s\n * what it does */' "$SPDX")" ] &&
    [ -x "$D/script" ] && sh -n "$D/code_first.sh" && cc -fsyntax-only -x c "$D/late.c" &&
    python3 -c 'import sys; sys.path[:0] = [sys.argv[1]]; import docstring_first as m
assert m.__doc__ == "what it does"' "$D"
verdict "--fix adds it to each of them (the /* block opens with it); they pass and still parse" ||
    sed 's/^/# /' "$TMP/fix.out" "$TMP/fixed.out"

# A file that git does not know yet is a source file of the tree too.
git clone -q "$SRC" "$TMP/clone" 2>/dev/null &&
    mkdir -p "$TMP/clone/agent" && printf '/* a new file */\n' >"$TMP/clone/agent/new_file.c"
"$TMP/clone/scripts/check-license.sh" >"$TMP/new.out" 2>&1
rc=$?
[ $rc -eq 1 ] && [ "$(cat "$TMP/new.out")" = "agent/new_file.c: no '$SPDX' in its first comment" ]
verdict "a new file without it, not yet added to git, is named (rc $rc)" ||
    head -5 "$TMP/new.out" | sed 's/^/# /'
finish
