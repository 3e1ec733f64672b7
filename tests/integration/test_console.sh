#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 21
# ddprun's own stdout and stderr held by a reader that stalls (a terminal under Ctrl-S, a pipe
# into a stopped program, a launcher suspended while ssh carries an agent's output): supervision
# goes on (signals are handled, the job stops within --shutdown_timeout), and worker output is
# held back, not lost, until the reader takes it again (agent/console.c); while it stalls, the
# agent sleeps.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun

# A worker that writes far more than a pipe and the console's queue hold, then waits.
LOUD='i=0; while [ $i -lt 40 ]; do head -c 200000 /dev/zero | tr "\0" x | fold -w 99; i=$((i+1)); done; sleep 60'

# 1. stdout into a FIFO whose reader (this shell, fd 7) never reads; stderr to a file. SIGTERM
# stops the job: the agent never blocks in a write.
d=$TMP/stalled_out; mkdir -p "$d"; mkfifo "$d/fifo"
exec 7<>"$d/fifo"
timeout -k 5 40 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --shutdown_timeout 2 \
    --no_python sh -c "$LOUD" >"$d/fifo" 2>"$d/err" &
tpid=$!
dpid=$(child_pid $tpid)
sleep 2 # the FIFO and the queue fill; the workers block on their pipes
kill -TERM "$dpid"
wait $tpid; rc=$?
exec 7<&-
[ $rc -eq 143 ]
verdict "a stdout that is never read: SIGTERM still stops the job (143, not hung)" ||
    show_tail "$d/err"
check "nothing left running after the stalled stdout" no_leftovers

# 2. stdout and stderr both into the stalled FIFO (the agent's own lines too).
d=$TMP/stalled_both; mkdir -p "$d"; mkfifo "$d/fifo"
exec 7<>"$d/fifo"
timeout -k 5 40 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --shutdown_timeout 2 -v \
    --no_python sh -c "$LOUD" >"$d/fifo" 2>&1 &
tpid=$!
dpid=$(child_pid $tpid)
sleep 2
kill -TERM "$dpid"
wait $tpid; rc=$?
exec 7<&-
[ $rc -eq 143 ]
verdict "stdout and stderr never read: SIGTERM still stops the job (143)"
check "nothing left running after the stalled stdout and stderr" no_leftovers

# 3. A reader that stalls, then reads everything: no line is lost or torn.
d=$TMP/late_reader; mkdir -p "$d"; mkfifo "$d/fifo"
exec 7<>"$d/fifo"
timeout -k 5 60 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --no_python \
    sh -c 'seq 1 300000 | sed "s/^/line /"' >"$d/fifo" 2>"$d/err" &
tpid=$!
sleep 2 # stalled: the pipes, the queue, then the workers wait
timeout 60 cat <&7 >"$d/out" &
cpid=$!
wait $tpid; rc=$?
sleep 0.5
kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
exec 7<&-
lines=$(grep -c '^\[default[01]\]:line [0-9]*$' "$d/out")
[ $rc -eq 0 ] && [ "$lines" -eq 600000 ] && [ "$(wc -l <"$d/out")" -eq 600000 ]
verdict "a reader that stalls then reads: all 600000 lines arrive whole (got $lines)" ||
    show_tail "$d/err"

# 4. stdout a socket that is never read (a service whose stdout is the journal's socket): ddprun
# never sets O_NONBLOCK on the description it shares with whoever else writes there (seen from
# this side of the socket while the job runs), and SIGTERM still stops a job whose tee'd output
# fills the socket.
d=$TMP/socket_out; mkdir -p "$d"
timeout -k 5 60 python3 - "$DDPRUN" "$d" "$LOUD" <<'PY' >"$d/py.out" 2>&1; rc=$?
import fcntl, os, signal, socket, subprocess, sys, time
ddprun, d, loud = sys.argv[1:4]
keep, theirs = socket.socketpair()  # "keep" is never read
q = subprocess.Popen([ddprun, "--standalone", "--nproc_per_node=2", "--tee", "3",
                      "--shutdown_timeout", "2", "--no_python", "sh", "-c", loud],
                     stdout=theirs, stderr=open(d + "/err", "w"))
time.sleep(2)
print("nonblocking", bool(fcntl.fcntl(theirs.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK))
q.send_signal(signal.SIGTERM)
try:
    print("term-run", q.wait(timeout=20))
except subprocess.TimeoutExpired:
    q.kill()
    print("term-run hung")
PY
[ $rc -eq 0 ] && grep -qx "nonblocking False" "$d/py.out" && grep -qx "term-run 143" "$d/py.out"
verdict "stdout a socket never read: its shared description stays blocking, SIGTERM stops the job" ||
    show_tail "$d/py.out" "$d/err"
check "nothing left running after the socket stdout" no_leftovers

# 5. While the reader stalls, the agent sleeps: it waits for the pipe to take more (a poll on its
# own descriptor), it does not try again every few milliseconds. Its voluntary context switches
# over 2 s of a stalled FIFO stay few (a 10 ms retry timer makes them about 200).
d=$TMP/stalled_idle; mkdir -p "$d"; mkfifo "$d/fifo"
exec 7<>"$d/fifo"
timeout -k 5 40 "$DDPRUN" --standalone --nproc_per_node=2 --tee 3 --shutdown_timeout 2 \
    --no_python sh -c "$LOUD" >"$d/fifo" 2>"$d/err" &
tpid=$!
dpid=$(child_pid $tpid)
switches() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$dpid/status"; }
sleep 1.5 # the FIFO and the queue fill; the workers block on their pipes
s0=$(switches)
sleep 2
s1=$(switches)
kill -TERM "$dpid"
wait $tpid; rc=$?
exec 7<&-
[ $rc -eq 143 ] && [ -n "$s0" ] && [ -n "$s1" ] && [ $((s1 - s0)) -lt 40 ]
verdict "a stalled stdout: the agent sleeps until it can write ($((s1 - s0)) wakeups in 2 s)" ||
    show_tail "$d/err"
check "nothing left running after the stalled stdout" no_leftovers

finish
