#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file names its license in its first comment: "SPDX-License-Identifier:
# Apache-2.0" (LICENSE holds the text). Source files are C (.c, .h, .cu), shell (.sh, .sbatch and
# any file that starts with #!), Python (.py) and make (Makefile, .mk); a #! line comes before the
# comment. With no argument the tree's are checked: the files git knows and the new ones it does
# not ignore (every file, outside git). With arguments, those files. Each file without the line is
# named; the exit status is 1 when there is one, 0 otherwise.
#   scripts/check-license.sh [--fix] [FILE...]
# --fix adds the line to each file without it instead: it opens the first comment when that is a
# "/* " block, else it comes on a line of its own before the first line after a #! line and
# blank lines (a new file, or one that came from a branch without the line).
set -u
SPDX='SPDX-License-Identifier: Apache-2.0'

# first_comment FILE c|hash: the file's first comment (after a #! line and blank lines): a /* */
# block or // lines for C, # lines otherwise; nothing when code comes first.
first_comment() {
    awk -v mode="$2" '
        NR == 1 && /^#!/ { next }
        state == 0 && /^[[:space:]]*$/ { next }
        state == 0 {
            if (mode == "c" && $0 ~ /^[[:space:]]*\/\*/) state = 1
            else if (mode == "c" && $0 ~ /^[[:space:]]*\/\//) state = 2
            else if (mode == "hash" && $0 ~ /^[[:space:]]*#/) state = 3
            else exit
        }
        state == 1 { print; if ($0 ~ /\*\//) exit; next }
        state == 2 { if ($0 !~ /^[[:space:]]*\/\//) exit; print; next }
        state == 3 { if ($0 !~ /^[[:space:]]*#/) exit; print; next }' "$1"
}

# add_line FILE c|hash: writes the line into FILE as --fix says, into a new file that replaces it
# (with its mode): a shell reading FILE as a script, this one too, keeps the old one.
add_line() {
    local tmp
    tmp=$(mktemp "$1.XXXXXX") || return 1
    awk -v mode="$2" -v spdx="$SPDX" '
        !done && !(NR == 1 && /^#!/) && !/^[[:space:]]*$/ {
            done = 1
            if (mode == "c" && /^\/\* /) { print "/* " spdx; print " * " substr($0, 4); next }
            if (mode == "c" && /^\/\//) print "// " spdx
            else if (mode == "c") print "/* " spdx " */"
            else print "# " spdx
        }
        { print }
        END { if (!done) print (mode == "c" ? "/* " spdx " */" : "# " spdx) }' "$1" >"$tmp" &&
        chmod --reference="$1" "$tmp" && mv "$tmp" "$1" && return 0
    rm -f "$tmp"
    return 1
}

fix=0
if [ "${1:-}" = --fix ]; then
    fix=1
    shift
fi
if [ $# -gt 0 ]; then
    files=("$@")
else
    cd "$(dirname "$0")/.."
    files=()
    if git rev-parse --git-dir >/dev/null 2>&1; then
        while IFS= read -r -d '' f; do files+=("$f"); done \
            < <(git ls-files -z --cached --others --exclude-standard)
    else
        while IFS= read -r -d '' f; do files+=("${f#./}"); done < <(find . -type d \( -name .git \
            -o -name build -o -name 'build-*' -o -name .cache \) -prune -o -type f -print0)
    fi
fi
missing=0
for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    case "$f" in
    *.c | *.h | *.cu) mode=c ;;
    *.sh | *.sbatch | *.py | *.mk | Makefile | */Makefile) mode=hash ;;
    *) if [ "$(head -c 2 "$f" | tr -d '\0')" = '#!' ]; then mode=hash; else continue; fi ;;
    esac
    first_comment "$f" "$mode" | grep -qF "$SPDX" && continue
    if [ $fix -eq 1 ]; then
        add_line "$f" "$mode" && echo "$f: '$SPDX' added" || missing=1
    else
        echo "$f: no '$SPDX' in its first comment"
        missing=1
    fi
done
exit $missing
