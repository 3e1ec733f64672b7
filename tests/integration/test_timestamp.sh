#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --timestamp_output: every line of worker output, on the console (stdout and stderr, after the
# --tee tag) and in the --log_dir files (--tee and --redirects), starts with the UTC time the
# agent read its first bytes, "2026-12-07T02:41:07.123456Z ". The stamps lie within the run, never
# go back within one stream, and a line written in two pieces gets the time of the first. A line
# cut for its length carries the same stamp on each console piece and one in the file. Without
# the flag the output is what the program wrote, byte for byte. A bad value: one line, exit 2.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun

STAMP='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z '
now() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }

# 2 workers: 20 lines on stdout and on stderr each, then a line whose two halves are 0.3 s
# apart (a line on stderr in between), then, with LONG set, a line of 140000 bytes (more than
# two of the agent's longest console pieces).
W=$TMP/worker.sh
cat >"$W" <<'EOF'
#!/bin/sh
r=$LOCAL_RANK
i=0
while [ $i -lt 20 ]; do
    echo "out $r $i"
    echo "err $r $i" >&2
    i=$((i + 1))
    sleep 0.01
done
printf 'part %s' "$r"
sleep 0.3
echo "mid $r" >&2
echo " whole"
[ -z "${LONG:-}" ] || { head -c 140000 /dev/zero | tr '\0' y; echo; }
EOF
chmod +x "$W"

# What worker RANK writes to stream STD (out or err), without the long line.
expected() {
    local i=0
    while [ $i -lt 20 ]; do echo "$2 $1 $i"; i=$((i + 1)); done
    if [ "$2" = out ]; then echo "part $1 whole"; else echo "mid $1"; fi
}

# every_line_stamped FILE PREFIX_RE: each line is PREFIX_RE, a stamp, then the rest.
every_line_stamped() {
    [ -s "$1" ] && ! grep -Evq "^$2$STAMP" "$1"
}

# stamps FILE PREFIX: the stamps of the lines of FILE starting with PREFIX (fixed string).
stamps() {
    awk -v p="$2" 'index($0, p) == 1 { print substr($0, length(p) + 1, 27) }' "$1"
}

# within FILE PREFIX T0 T1: every stamp of PREFIX's lines lies in [T0, T1] and none is below the
# one before it (the stamps' fixed width orders them as text).
within() {
    stamps "$1" "$2" | awk -v t0="$3" -v t1="$4" '
        $0 < t0 || $0 > t1 || $0 < last { bad = 1 } { last = $0; n++ }
        END { exit bad || n == 0 }'
}

# unstamped FILE PREFIX: PREFIX's lines of FILE, tag and stamp removed.
unstamped() {
    awk -v p="$2" 'index($0, p) == 1 { print substr($0, length(p) + 29) }' "$1"
}

# 1. --tee 3 with --log_dir: console and files.
d=$TMP/tee; mkdir -p "$d"
t0=$(now)
timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --log_dir "$d/logs" \
    --timestamp_output --no_python "$W" >"$d/out" 2>"$d/err"; rc=$?
t1=$(now)
grep -Ev '^ddprun\[' "$d/err" >"$d/werr" # ddprun's own lines carry their own time
[ $rc -eq 0 ] && every_line_stamped "$d/out" '\[default[01]\]:'
verdict "--tee: every stdout line is the rank tag, then a stamp" || show_tail "$d/out"
check "--tee: every worker stderr line is the rank tag, then a stamp" \
    every_line_stamped "$d/werr" '\[default[01]\]:'
ok_in=1
for r in 0 1; do
    for f in out werr; do within "$d/$f" "[default$r]:" "$t0" "$t1" || ok_in=0; done
done
[ $ok_in -eq 1 ]
verdict "--tee: the stamps lie within the run and never go back within a rank's stream"
ok_text=1
for r in 0 1; do
    [ "$(unstamped "$d/out" "[default$r]:")" = "$(expected $r out)" ] || ok_text=0
    [ "$(unstamped "$d/werr" "[default$r]:")" = "$(expected $r err)" ] || ok_text=0
done
[ $ok_text -eq 1 ]
verdict "--tee: after the stamp, each line is what the worker wrote" || show_tail "$d/out"
# The line written in two pieces has the time of the first: before the stderr line that the
# worker wrote between them.
ok_first=1
for r in 0 1; do
    part=$(grep -F "part $r whole" "$d/out" | cut -c 12-38)
    mid=$(grep -F "mid $r" "$d/werr" | cut -c 12-38)
    [ -n "$part" ] && [ -n "$mid" ] && [[ "$part" < "$mid" ]] || ok_first=0
done
[ $ok_first -eq 1 ]
verdict "a line read in two pieces gets the time of its first piece"
ok_files=1
for r in 0 1; do
    for f in stdout stderr; do
        log=$d/logs/attempt_0/$r/$f.log
        every_line_stamped "$log" '' && within "$log" '' "$t0" "$t1" || ok_files=0
        [ "$(awk '{ print substr($0, 29) }' "$log")" = "$(expected $r ${f#std})" ] || ok_files=0
    done
done
[ $ok_files -eq 1 ]
verdict "--log_dir files under --tee: each line a stamp, then what the worker wrote" ||
    show_tail "$d/logs/attempt_0/0/stdout.log"
# The file and the console show the same time for the same line.
[ "$(stamps "$d/out" "[default1]:")" = "$(stamps "$d/logs/attempt_0/1/stdout.log" '')" ]
verdict "the console and the file carry the same stamp for each line"

# 2. --redirects 3: the files only, written by the agent so that it can stamp them.
d=$TMP/redirects; mkdir -p "$d"
t0=$(now)
timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 --redirects 3 --log_dir "$d/logs" \
    --timestamp-output --no_python "$W" >"$d/out" 2>"$d/err"; rc=$?
t1=$(now)
ok_files=1
for r in 0 1; do
    for f in stdout stderr; do
        log=$d/logs/attempt_0/$r/$f.log
        every_line_stamped "$log" '' && within "$log" '' "$t0" "$t1" || ok_files=0
        [ "$(awk '{ print substr($0, 29) }' "$log")" = "$(expected $r ${f#std})" ] || ok_files=0
    done
done
[ $rc -eq 0 ] && [ $ok_files -eq 1 ] && [ ! -s "$d/out" ]
verdict "--redirects 3 (--timestamp-output): the files' lines are stamped, the console is empty" ||
    show_tail "$d/err"

# 3. No --tee: the console lines start with the stamp.
d=$TMP/plain; mkdir -p "$d"
PET_TIMESTAMP_OUTPUT=1 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 --no_python \
    "$W" >"$d/out" 2>/dev/null; rc=$?
[ $rc -eq 0 ] && every_line_stamped "$d/out" '' && [ "$(wc -l <"$d/out")" -eq 42 ]
verdict "PET_TIMESTAMP_OUTPUT=1 without --tee: each console line starts with the stamp" ||
    show_tail "$d/out"

# 4. A line longer than the agent's longest console piece: on the console each piece is a line
# with the tag and the line's one stamp; the file has the line whole, stamped once.
d=$TMP/long; mkdir -p "$d"
LONG=1 timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=1 --tee 1 --log_dir "$d/logs" \
    --timestamp_output --no_python "$W" >"$d/out" 2>/dev/null; rc=$?
grep -E "^\[default0\]:${STAMP}y" "$d/out" >"$d/pieces"
n_stamps=$(cut -c 12-38 "$d/pieces" | sort -u | wc -l)
[ $rc -eq 0 ] && [ "$(wc -l <"$d/pieces")" -eq 3 ] && [ "$n_stamps" -eq 1 ] &&
    [ "$(cut -c 40- "$d/pieces" | tr -d '\n' | wc -c)" -eq 140000 ] &&
    every_line_stamped "$d/out" '\[default0\]:'
verdict "a line cut for its length: 3 console pieces, each tagged, with the one stamp" ||
    show_tail "$d/out"
log=$d/logs/attempt_0/0/stdout.log
[ "$(grep -c y "$log")" -eq 1 ] && every_line_stamped "$log" '' &&
    [ "$(grep y "$log" | cut -c 1-27)" = "$(head -1 "$d/pieces" | cut -c 12-38)" ] &&
    [ "$(grep y "$log" | cut -c 29- | wc -c)" -eq 140001 ]
verdict "a line cut for its length: whole in the file, stamped once, with the console's time"

# 5. Without the flag: exactly what the program wrote (tagged under --tee), console and files.
d=$TMP/off; mkdir -p "$d"
timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --log_dir "$d/logs" \
    --no_python "$W" >"$d/out" 2>"$d/err"; rc=$?
ok_same=1
for r in 0 1; do
    [ "$(grep -F "[default$r]:" "$d/out")" = "$(expected $r out | sed "s/^/[default$r]:/")" ] ||
        ok_same=0
    cmp -s "$d/logs/attempt_0/$r/stdout.log" <(expected $r out) || ok_same=0
    cmp -s "$d/logs/attempt_0/$r/stderr.log" <(expected $r err) || ok_same=0
done
[ $rc -eq 0 ] && [ $ok_same -eq 1 ] && [ "$(wc -l <"$d/out")" -eq 42 ]
verdict "without the flag: console and files are the program's bytes, tagged on the console" ||
    show_tail "$d/out"
# Against another build (REF_DDPRUN=/path/to/ddprun, e.g. the main branch's): the same bytes.
if [ -n "${REF_DDPRUN:-}" ] && [ -x "$REF_DDPRUN" ]; then
    timeout -k 5 30 "$REF_DDPRUN" --standalone --nproc_per_node=2 --tee 3 --log_dir "$d/ref" \
        --no_python "$W" >"$d/ref_out" 2>/dev/null
    ok_ref=1
    for r in 0 1; do
        [ "$(grep -F "[default$r]:" "$d/out")" = "$(grep -F "[default$r]:" "$d/ref_out")" ] ||
            ok_ref=0
        cmp -s "$d/logs/attempt_0/$r/stdout.log" "$d/ref/attempt_0/$r/stdout.log" || ok_ref=0
        cmp -s "$d/logs/attempt_0/$r/stderr.log" "$d/ref/attempt_0/$r/stderr.log" || ok_ref=0
    done
    [ $ok_ref -eq 1 ] && cmp -s <(sort "$d/out") <(sort "$d/ref_out")
    verdict "without the flag: the same bytes as $REF_DDPRUN"
else
    skip "without the flag: the same bytes as REF_DDPRUN" "REF_DDPRUN is not set"
fi

# 6. Bad values: one line naming the flag, exit 2, nothing started.
d=$TMP/bad; mkdir -p "$d"
PET_TIMESTAMP_OUTPUT=maybe timeout -k 5 10 "$DDPRUN" --standalone --no_python echo started \
    >"$d/out" 2>&1; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$d/out")" -eq 1 ] &&
    grep -q "PET_TIMESTAMP_OUTPUT: 'maybe' is not 0 or 1" "$d/out"
verdict "PET_TIMESTAMP_OUTPUT=maybe: one line naming it, exit 2" || show_tail "$d/out"
timeout -k 5 10 "$DDPRUN" --standalone --timestamp_output=maybe --no_python echo started \
    >"$d/out" 2>&1; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$d/out")" -eq 1 ] &&
    grep -q -- "--timestamp_output takes no value" "$d/out"
verdict "--timestamp_output=maybe: one line naming the flag, exit 2" || show_tail "$d/out"

check "nothing left running" no_leftovers
finish
