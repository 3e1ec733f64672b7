#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The man pages, ddprun(1) and ddp-rendezvous(8) (make man: docs/man/*.in, their OPTIONS built
# from each program's --help by scripts/help2man.py): groff reads them without a warning, man
# renders them, they have the sections a man page needs, and every flag --help lists is in them.
. "$(dirname "$0")/lib.sh"
pages=("$BIN/man/ddprun.1:$BIN/ddprun" "$BIN/man/ddp-rendezvous.8:$BIN/ddp-rendezvous")
if ! command -v groff >/dev/null || ! command -v man >/dev/null; then
    for p in "${pages[@]}"; do
        skip "$(basename "${p%%:*}"): renders without warnings, every --help flag in it" \
            "groff or man is missing (apt-get install man-db groff-base)"
    done
    finish
    exit 0
fi
for p in "${pages[@]}"; do
    page=${p%%:*} prog=${p#*:} name=$(basename "${p%%:*}")
    check "$name: built by make man" [ -s "$page" ]
    groff -man -ww -z "$page" >"$TMP/$name.warn" 2>&1
    check "$name: groff reads it without a warning" [ ! -s "$TMP/$name.warn" ]
    sed 's/^/# /' "$TMP/$name.warn" | head -5
    LC_ALL=C.UTF-8 MANWIDTH=100 man -l "$page" 2>"$TMP/$name.err" | col -b >"$TMP/$name.txt"
    check "$name: man -l renders it, nothing on stderr" \
        bash -c "[ -s '$TMP/$name.txt' ] && [ ! -s '$TMP/$name.err' ]"
    missing=
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT "SEE ALSO"; do
        grep -q "^$s\$" "$TMP/$name.txt" || missing="$missing $s"
    done
    check "$name: sections NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT SEE ALSO (missing:${missing:- none})" \
        [ -z "$missing" ]
    missing=
    for f in $("$prog" --help | sed -nE 's/^ +(-[a-zA-Z], )?(--[a-z][a-z_-]*).*/\2/p' | sort -u); do
        grep -Eq "^ +(-[a-zA-Z], )?$f( |\$)" "$TMP/$name.txt" || missing="$missing $f"
    done
    check "$name: every flag of --help is an entry of OPTIONS (missing:${missing:- none})" \
        [ -z "$missing" ]
done
finish
