#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The files ddprun writes into directories another user may write to (an existing --log_dir, the
# event log's directory): what is planted under the names it uses is never written through and
# never blocks it. A symbolic link to a file (the "victim", standing for a file of root's) at
# stdout.log, filtered_stdout.log, stacks.txt or the event log; a link for a directory; a FIFO
# with no reader or a stalled one; a full disk under the event log (a torn line never stays) and
# under --log_dir (the job goes on; the loss is said and counted).
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
command -v python3 >/dev/null || { skip "planted files" "python3 is missing"; finish; exit 0; }

victim=$TMP/victim
plant_victim() { printf 'precious\n' >"$victim"; }
victim_intact() { [ "$(cat "$victim")" = precious ]; }

# 1. A link at a worker's stdout.log: refused, naming it; the victim is untouched; nothing runs.
d=$TMP/out_link; mkdir -p "$d/logs/attempt_0/0"; plant_victim
ln -s "$victim" "$d/logs/attempt_0/0/stdout.log"
timeout -k 5 20 "$DDPRUN" --standalone --nproc_per_node=2 --log_dir "$d/logs" --redirects 3 \
    --no_python echo written-through >"$d/out" 2>&1; rc=$?
[ $rc -ne 0 ] && victim_intact &&
    grep -q "unable to open $d/logs/attempt_0/0/stdout.log: a symbolic link, not followed" "$d/out"
verdict "a link planted at stdout.log is refused by name; its target is untouched" ||
    show_tail "$d/out"
check "nothing left running after the refusal" no_leftovers

# 2. A link for the attempt directory itself: nothing is created behind it.
d=$TMP/dir_link; mkdir -p "$d/logs" "$d/elsewhere"
ln -s "$d/elsewhere" "$d/logs/attempt_0"
timeout -k 5 20 "$DDPRUN" --standalone --log_dir "$d/logs" --redirects 3 --no_python echo hi \
    >"$d/out" 2>&1; rc=$?
[ $rc -ne 0 ] && [ -z "$(ls -A "$d/elsewhere")" ] &&
    grep -q "$d/logs/attempt_0: a symbolic link, not followed" "$d/out"
verdict "a link planted for attempt_0 is refused; nothing is written behind it" ||
    show_tail "$d/out"

# 3. --duplicate_stdout_filters: a link at filtered_stdout.log is replaced by a file of ddprun's,
# which gets the filtered lines; the victim is untouched.
d=$TMP/filtered; mkdir -p "$d/logs/attempt_0"; plant_victim
ln -s "$victim" "$d/logs/attempt_0/filtered_stdout.log"
timeout -k 5 20 "$DDPRUN" --standalone --log_dir "$d/logs" --tee 3 \
    --duplicate_stdout_filters needle --no_python echo needle >"$d/out" 2>&1; rc=$?
[ $rc -eq 0 ] && victim_intact && [ ! -L "$d/logs/attempt_0/filtered_stdout.log" ] &&
    grep -q needle "$d/logs/attempt_0/filtered_stdout.log"
verdict "a link at filtered_stdout.log is replaced, never appended through" || show_tail "$d/out"

# 4. A hung worker's stacks.txt planted as a link: the stacks go to a new file of ddprun's.
d=$TMP/stacks; mkdir -p "$d/logs/attempt_0/0"; plant_victim
ln -s "$victim" "$d/logs/attempt_0/0/stacks.txt"
timeout -k 5 40 "$DDPRUN" --standalone --log_dir "$d/logs" --heartbeat_timeout=0.5 \
    --initial_heartbeat_timeout=0.5 --stacks_timeout=5 --no_python sh -c 'sleep 30' \
    >"$d/out" 2>&1; rc=$?
[ $rc -eq 1 ] && victim_intact && [ ! -L "$d/logs/attempt_0/0/stacks.txt" ] &&
    grep -q "ddprun stacks of process group" "$d/logs/attempt_0/0/stacks.txt"
verdict "a link at stacks.txt is replaced: the victim keeps its text, the stacks their file" ||
    show_tail "$d/out"

# 5. FIFOs never block: at stdout.log (no reader), and as the event log (no reader, or one that
# never reads). Each is refused at once with a line naming it; `timeout` bounds a hang.
d=$TMP/fifo; mkdir -p "$d/logs/attempt_0/0"
mkfifo "$d/logs/attempt_0/0/stdout.log"
timeout -k 5 20 "$DDPRUN" --standalone --log_dir "$d/logs" --redirects 3 --no_python echo hi \
    >"$d/out" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    grep -q "$d/logs/attempt_0/0/stdout.log: a FIFO, not a regular file" "$d/out"
verdict "a FIFO at stdout.log: refused at once, by name (no blocked open)" || show_tail "$d/out"
mkfifo "$d/events"
timeout -k 5 20 "$DDPRUN" --standalone --event_log_handler "json:$d/events" --no_python true \
    >"$d/ev.out" 2>&1; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$d/ev.out")" = 1 ] &&
    grep -q -- "--event_log_handler: unable to open $d/events: a FIFO, not a regular file" "$d/ev.out"
verdict "json:FIFO without a reader: exit 2 at once, one line naming the flag and the FIFO" ||
    show_tail "$d/ev.out"
# A reader that holds the FIFO open and never reads (it only waits for its own end).
sleep 60 <"$d/events" &
reader=$!
exec 7>"$d/events" # the reader's open completes once a writer is there; this end stays unused
timeout -k 5 20 "$DDPRUN" --standalone --event_log_handler "json:$d/events" --no_python true \
    >"$d/ev2.out" 2>&1; rc=$?
exec 7>&-
kill "$reader" 2>/dev/null; wait "$reader" 2>/dev/null
[ $rc -eq 2 ] && grep -q "a FIFO, not a regular file" "$d/ev2.out"
verdict "json:FIFO with a stalled reader: exit 2 at once, never a blocked write" ||
    show_tail "$d/ev2.out"

# 6. json:PATH planted as a link: exit 2, the victim untouched.
d=$TMP/evlink; mkdir -p "$d"; plant_victim
ln -s "$victim" "$d/events.json"
timeout -k 5 20 "$DDPRUN" --standalone --event_log_handler "json:$d/events.json" --no_python true \
    >"$d/out" 2>&1; rc=$?
[ $rc -eq 2 ] && victim_intact &&
    grep -q -- "--event_log_handler: unable to open $d/events.json: a symbolic link, not followed" "$d/out"
verdict "json:PATH planted as a link: exit 2 naming it; its target is untouched" ||
    show_tail "$d/out"

# 7. A full disk under the event log (a tmpfs of 8 pages, 7 of them taken): events that do not
# fit are dropped whole, counted and said; every line in the file stays valid JSON, and once
# there is room again the next run's events follow on lines of their own.
valid_lines() {
    python3 - "$1" <<'PY'
import json, sys
data = open(sys.argv[1], "rb").read()
assert data == b"" or data.endswith(b"\n"), "the file ends inside a line"
for line in data.splitlines():
    json.loads(line)
print(len(data.splitlines()))
PY
}
d=$TMP/full; mkdir -p "$d/fs"
if [ "$(id -u)" != 0 ]; then
    skip "a full disk: no torn event line, the loss said" "needs root to mount a small tmpfs"
elif ! mount -t tmpfs -o size=32k,mode=0755 ddptest "$d/fs" 2>"$d/mount.err"; then
    skip "a full disk: no torn event line, the loss said" "tmpfs mount failed: $(head -1 "$d/mount.err")"
else
    head -c 28672 /dev/zero >"$d/fs/filler" 2>/dev/null
    # A failing worker restarted 9 times: about 40 events, some 10 KiB, more than the one page.
    timeout -k 5 60 "$DDPRUN" --standalone --max_restarts=9 --event_log_handler "json:$d/fs/ev.json" \
        --no_python sh -c 'exit 3' >"$d/out" 2>&1; rc=$?
    n1=$(valid_lines "$d/fs/ev.json" 2>"$d/py.err")
    [ $rc -eq 1 ] && [ -n "$n1" ] && [ "$n1" -gt 0 ] &&
        [ "$(grep -c 'unable to write an event' "$d/out")" = 1 ] &&
        grep -qE 'json: [0-9]+ events could not be written' "$d/out"
    verdict "a full disk: every line written is whole JSON; the loss is said once and counted" ||
        show_tail "$d/out" "$d/py.err"
    rm -f "$d/fs/filler"
    timeout -k 5 20 "$DDPRUN" --standalone --event_log_handler "json:$d/fs/ev.json" --no_python true \
        >"$d/out2" 2>&1; rc=$?
    n2=$(valid_lines "$d/fs/ev.json" 2>"$d/py2.err")
    [ $rc -eq 0 ] && [ -n "$n2" ] && [ "$n2" -gt "$n1" ] && tail -1 "$d/fs/ev.json" | grep -q '"shutdown"'
    verdict "room again: the next run's events follow, every line whole" ||
        show_tail "$d/out2" "$d/py2.err"
    umount "$d/fs"
fi

# 8. A full disk under --log_dir with --tee 3 (a tmpfs of 16 pages, 12 of them taken): each rank
# writes more than is left. The job goes on and exits 0; the first failure is said once, naming
# the file and rank; each file that lost output is one log_write_failed event; the bytes lost
# are a metric while the job runs and one line at exit. The workers wait (bounded) for the
# metric to be read.
d=$TMP/logfull; mkdir -p "$d/fs"
if [ "$(id -u)" != 0 ]; then
    skip "a full disk under --log_dir: said once, counted, the job goes on" "needs root to mount a small tmpfs"
elif ! mount -t tmpfs -o size=64k,mode=0755 ddptest "$d/fs" 2>"$d/mount.err"; then
    skip "a full disk under --log_dir: said once, counted, the job goes on" "tmpfs mount failed: $(head -1 "$d/mount.err")"
else
    head -c 49152 /dev/zero >"$d/fs/filler" 2>/dev/null
    timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --log_dir "$d/fs/logs" \
        --metrics 127.0.0.1:0 --event_log_handler "json:$d/ev.json" --no_python sh -c \
        'head -c 200000 /dev/zero | tr "\0" x; echo; i=0
         while [ ! -e "$0" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; echo done' \
        "$d/go" >"$d/out" 2>"$d/err" &
    job=$!
    lost=
    if wait_for "$d/err" 'serving metrics on http://127\.0\.0\.1:[0-9]+/metrics' 20; then
        mport=$(sed -n 's|.*serving metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$d/err")
        for _ in $(seq 200); do
            lost=$(python3 - "$mport" 2>/dev/null <<'PY'
import http.client, re, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/metrics")
m = re.search(r"^ddprun_agent_log_bytes_lost_total\{.*\} (\d+)$", c.getresponse().read().decode(), re.M)
print(m.group(1) if m and int(m.group(1)) > 0 else "")
PY
)
            [ -n "$lost" ] && break
            sleep 0.05
        done
    fi
    touch "$d/go"
    wait "$job"; rc=$?
    events=$(grep -c '"event":"log_write_failed"' "$d/ev.json" 2>/dev/null)
    [ $rc -eq 0 ] && [ -n "$lost" ] && [ "$(grep -c 'done' "$d/out")" = 2 ] &&
        [ "$(grep -c 'unable to write ' "$d/err")" = 1 ] &&
        grep -qE "unable to write $d/fs/logs/attempt_0/[01]/stdout.log \(rank [01]\): No space left on device" "$d/err" &&
        grep -qE '^ddprun.* [0-9]+ bytes of worker output could not be written to the log files$' "$d/err" &&
        [ "$events" = 2 ] && grep '"event":"log_write_failed"' "$d/ev.json" | grep -q '"file":"'"$d"'/fs/logs/attempt_0/1/stdout.log"'
    verdict "a full disk under --log_dir: exit 0, said once, counted (metric: ${lost:-none}, events: ${events:-0})" ||
        show_tail "$d/err" "$d/ev.json"
    umount "$d/fs"
fi
check "nothing left running" no_leftovers
finish
