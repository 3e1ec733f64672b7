#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make bench-etcd: the death of the host that serves the rendezvous store, and the time until the
# first worker of the next round starts. Three "hosts" on loopback, each an agent with one worker
# in a session (process group) of its own, --nnodes=2:3, one etcd member on 127.0.0.1 (started
# here with --enable-v2, so that torchrun's etcd-v2 backend can use it too; it is no host's and
# is never killed). Once every worker runs, the host serving the store is frozen (SIGSTOP of every
# process of its tree) and killed (SIGKILL of them all); the time is from the first SIGSTOP to the
# CLOCK_MONOTONIC start of the first worker of the next round on the others. Then the job must end
# by itself: the workers of the next round run 2 s and exit 0.
#   ddprun --rdzv_backend=etcd at each lease_ttl of TTLS (default "4 2": ddprun's default and the
#     smallest etcd grants), last_call_timeout LAST_CALL_S (0.5 s) at DEFAULT_TTL (4), SMALL_LAST_CALL_S
#     (0.25 s) at the others; the host killed is the one whose agent says "served by this node".
#   ddprun --rdzv_backend=etcd --rdzv_conf etcd_stores=A+B+C at each lease_ttl of STORES_TTLS
#     (default TTLS; empty: none), the same last calls: the 3 hosts above are the store candidates
#     (node ranks 0-2, each serving at its address of the list), and FOLLOWERS more hosts (default
#     1, node ranks 3...) are followers that never talk to etcd; --nnodes=N-1:N over the N hosts,
#     so that the next round waits for every survivor, followers too. The serving candidate is
#     killed. A second table splits each ddprun run (from the agents' logs and the workers' start
#     times): the election (the new leader's line "served by this node" after the kill), the
#     next round (its "round N:" line, the latest survivor's) less the election (last_call_timeout
#     plus the time the last survivor took to JOIN the new store), and the slowest surviving
#     candidate's and the slowest follower's first worker after the kill.
#   torchrun 2.x (TORCH_PYTHON, else the venv of scripts/ensure-torch2.sh), TORCH_BACKENDS
#     (default "etcd-v2 c10d"): etcd-v2 against the same etcd (needs python-etcd in that venv;
#     the host killed serves the workers' TCPStore, group rank 0), c10d with the store on the
#     first agent (the host killed); last_call_timeout TORCH_LAST_CALL_S (1 s: torchrun takes
#     whole seconds), --monitor_interval 0.1.
# The worker is bench/etcd_failover_worker.py (gloo: a dead rank fails the others' allreduce)
# where PyTorch 2.x is there, else (and with WORKER=fake) the fake worker (until the end of the
# run; one started after the kill runs FW_AFTER_MS, default 2 s: ddprun alone re-forms on the
# store's loss, torchrun's rows are left out then).
# Everything runs under scripts/private-names.sh when it can (PyTorch's stores look names up).
# RUNS repetitions (default 5) a row; medians and quartiles (linear interpolation) in ms. Each wait
# is bounded by BOUND_S (default 60); KEEP_TMP=1 keeps every output. Exits 77 without etcd, 1
# when a ddprun run does not re-form or exit 0 (torchrun's failures are its figures), 0 otherwise.
#   BUILD=build RUNS=5 TTLS="4 2" bench/etcd_failover.sh
set -u
cd "$(dirname "$0")/.."
if [ -z "${ETCD_FAILOVER_PRIVATE:-}" ] && scripts/private-names.sh true 2>/dev/null; then
    ETCD_FAILOVER_PRIVATE=1 exec scripts/private-names.sh bash "$0" "$@"
fi
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
TTLS=${TTLS-4 2}
STORES_TTLS=${STORES_TTLS-$TTLS}
FOLLOWERS=${FOLLOWERS:-1}
# ddprun's default lease_ttl (RDZV_ETCD_STORE_TTL_S), measured with the default-like last call.
DEFAULT_TTL=${DEFAULT_TTL:-4}
LAST_CALL_S=${LAST_CALL_S:-0.5}
SMALL_LAST_CALL_S=${SMALL_LAST_CALL_S:-0.25}
TORCH_LAST_CALL_S=${TORCH_LAST_CALL_S:-1}
TORCH_BACKENDS=${TORCH_BACKENDS-etcd-v2 c10d}
BOUND_S=${BOUND_S:-60}
FW_AFTER_MS=${FW_AFTER_MS:-2000}
# The fake worker: one started after the kill runs FW_AFTER_MS, one before it BOUND_S.
FW=$BUILD/tests/fake_worker
case $FW in /*) ;; *) FW=$PWD/$FW ;; esac
FAKE="[ -e \"\$FAILOVER_DIR/killed\" ] && FW_SLEEP_MS=$FW_AFTER_MS || FW_SLEEP_MS=$((BOUND_S * 1000))
export FW_SLEEP_MS; exec '$FW'"
if ! command -v etcd >/dev/null 2>&1; then
    echo "# skipped: etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"
    exit 77
fi
PY=${TORCH_PYTHON:-}
[ -z "$PY" ] && [ -x .cache/torch2/bin/python ] && PY=.cache/torch2/bin/python
HAVE_TORCH=0
[ -n "$PY" ] && "$PY" -c 'import torch.distributed.run' 2>/dev/null && HAVE_TORCH=1
WORKER=${WORKER:-$([ $HAVE_TORCH = 1 ] && echo torch || echo fake)}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/etcdfail.XXXXXX")
ETCD=
declare -A HPID=()
# tree PID: every process of PID's tree frozen then killed; prints the CLOCK_MONOTONIC ns of
# the first SIGSTOP (the host's death), then the local time of day in ms at that moment (the
# agents' log lines carry their local time of day). A dead host's memory goes with it: what its
# ddprun kept in /dev/shm (one for every host here), named in its frozen workers' environment
# (the scratch directory, the private run directory), is removed as the host's death would.
tree() {
    python3 - "$1" <<'EOF'
import os, shutil, signal, sys, time
root = int(sys.argv[1])
def tree():
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    s = f.read()
                kids.setdefault(int(s[s.rindex(")") + 2:].split()[1]), []).append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out
t = time.monotonic_ns()
w = time.time()
lt = time.localtime(w)
day_ms = ((lt.tm_hour * 60 + lt.tm_min) * 60 + lt.tm_sec) * 1000 + (w % 1) * 1000
seen = set()
while True:
    new = [p for p in tree() if p not in seen]
    if not new:
        break
    for p in new:
        try:
            os.kill(p, signal.SIGSTOP)
        except OSError:
            pass
        seen.add(p)
shm = set()
for p in seen:
    try:
        with open(f"/proc/{p}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        continue
    shm.add(env.get(b"DDPRUN_SHM_DIR", b"").decode())
    shm.add(os.path.dirname(env.get(b"TORCHELASTIC_ERROR_FILE", b"").decode()))
for p in seen:
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
for d in shm:
    if d.startswith("/dev/shm/ddprun-") and d.count("/") == 3:
        shutil.rmtree(d, ignore_errors=True)
print(t, "%.0f" % day_ms)
EOF
}
cleanup() {
    local h
    for h in "${!HPID[@]}"; do tree "${HPID[$h]}" >/dev/null; done
    [ -n "$ETCD" ] && kill "$ETCD" 2>/dev/null && wait "$ETCD" 2>/dev/null
    if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port)
PP=$(free_port)
setpriv --pdeathsig KILL etcd --name one --data-dir "$TMP/etcd" --enable-v2 \
    --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
    --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
    --initial-cluster "one=http://127.0.0.1:$PP" >"$TMP/etcd.log" 2>&1 &
ETCD=$!
for _ in $(seq 200); do grep -q 'ready to serve client requests' "$TMP/etcd.log" && break; sleep 0.05; done
if ! grep -q 'ready to serve client requests' "$TMP/etcd.log"; then
    echo "# etcd did not start on 127.0.0.1:$EP: $(tail -1 "$TMP/etcd.log")"
    exit 1
fi
ETCD_VER=$(etcd --version | sed -n 's/^etcd Version: //p')

# host KIND DIR NAME ARGS...: one agent of KIND (ddprun | torchrun) in a session of its own.
host() {
    local kind=$1 d=$2 name=$3
    shift 3
    if [ "$kind" = ddprun ]; then
        if [ "$WORKER" = torch ]; then set -- "$@" "$PWD/bench/etcd_failover_worker.py"
        else set -- "$@" --no_python /bin/sh -c "$FAKE" sh; fi
        PYTHON_EXEC=$PY HOST_TAG=$name FAILOVER_DIR=$d FW_DIR=$d \
            setsid "$BUILD/ddprun" -v --nnodes="$NNODES" --nproc_per_node=1 --max_restarts=3 "$@" \
            >"$d/$name.out" 2>&1 </dev/null &
    else
        HOST_TAG=$name FAILOVER_DIR=$d GLOO_SOCKET_IFNAME=lo setsid "$PY" -m torch.distributed.run \
            --nnodes="$NNODES" --nproc_per_node=1 --max_restarts=3 --monitor_interval=0.1 "$@" \
            "$PWD/bench/etcd_failover_worker.py" >"$d/$name.out" 2>&1 </dev/null &
    fi
    HPID[$name]=$!
}
# live DIR: how many workers run now that have started (the fake worker's pid.* files) or done
# their first allreduce (the torch worker's ready.HOST.PID files): a round that has them all runs.
live() {
    local f p n=0
    for f in "$1"/pid.* "$1"/ready.*; do
        [ -e "$f" ] || continue
        case $f in */pid.*) p=$(cat "$f" 2>/dev/null) ;; *) p=${f##*.} ;; esac
        [ -n "$p" ] && kill -0 "$p" 2>/dev/null && n=$((n + 1))
    done
    echo $n
}
# starts DIR [HOST]: the start times (ns) of every worker (of HOST alone): the torch worker's
# t.HOST.PID, the fake worker's t.RANK.ROUND beside env.RANK.ROUND, which holds its HOST_TAG.
starts() {
    local f
    if [ -z "${2:-}" ]; then cat "$1"/t.* 2>/dev/null; return; fi
    cat "$1/t.$2".* 2>/dev/null
    for f in "$1"/env.*; do
        [ -e "$f" ] && grep -aqx "HOST_TAG=$2" "$f" && cat "$1/t.${f##*/env.}" 2>/dev/null
    done
}
# first_after DIR NS [HOST]: the earliest worker start (ns) after NS (on HOST alone), or nothing.
first_after() { starts "$1" "${3:-}" | awk -v k="$2" '$1 > k && (m == "" || $1 < m) {m = $1} END {if (m != "") print m}'; }
# line_after OUT MS ERE: the first line of the agent log OUT matching ERE after the local time of
# day MS, as ms after MS, or nothing.
line_after() {
    sed -nE "s/^ddprun\[agent [0-9]+\] ([0-9]+):([0-9]+):([0-9]+)\.([0-9]+) . ($3).*/\1 \2 \3 \4/p" "$1" |
        awk -v k="$2" '{t = (($1 * 60 + $2) * 60 + $3) * 1000 + $4; d = t - k; if (d < -43200000) d += 86400000
            if (d > 0) {print d; exit}}'
}
# phases TKILL DAYMS DIR CANDIDATES FOLLOWERS: "election round candidate-worker follower-worker"
# in ms after the kill (see the header), "-" where a host lacks the figure (no followers: "-").
phases() {
    local tk=$1 day=$2 d=$3 h t el=- ro=0 cw=0 fw=0
    for h in $4 $5; do
        t=$(line_after "$d/$h.out" "$day" 'rendezvous store now at .*, served by this node')
        [ -n "$t" ] && { [ "$el" = - ] || [ "$t" -lt "$el" ]; } && el=$t
        t=$(line_after "$d/$h.out" "$day" "rendezvous '[^']*' round [0-9]+:")
        if [ -n "$t" ] && [ "$ro" != - ]; then [ "$t" -gt "$ro" ] && ro=$t; else ro=-; fi
    done
    for h in $4; do
        t=$(first_after "$d" "$tk" "$h")
        if [ -n "$t" ] && [ "$cw" != - ]; then
            t=$(((t - tk) / 1000000))
            [ "$t" -gt "$cw" ] && cw=$t
        else cw=-; fi
    done
    [ -z "$5" ] && fw=-
    for h in $5; do
        t=$(first_after "$d" "$tk" "$h")
        if [ -n "$t" ] && [ "$fw" != - ]; then
            t=$(((t - tk) / 1000000))
            [ "$t" -gt "$fw" ] && fw=$t
        else fw=-; fi
    done
    echo "$el $ro $cw $fw"
}

# one KIND TTL RUN: one repetition; appends "ms" to $TMP/KIND.TTL.ms (or "-" when no next round),
# the survivors' exit codes to $TMP/KIND.TTL.rc, their last lines to $TMP/KIND.TTL.last; for
# ddprun's kinds the run's phases (see phases) to $TMP/KIND.TTL.split.
one() {
    local kind=$1 ttl=$2 i=$3 d=$TMP/$1.$2.$3 key=$1.$2 victim="" h n tk day t ms lc=$LAST_CALL_S
    local cands="h1 h2 h3" fols="" NNODES=2:3 nh stores=""
    mkdir -p "$d"
    HPID=()
    [ "$ttl" != - ] && [ "$ttl" != "$DEFAULT_TTL" ] && lc=$SMALL_LAST_CALL_S
    if [ "$kind" = stores ]; then
        for n in $(seq 4 $((FOLLOWERS + 3))); do fols="$fols h$n"; done
        NNODES=$((FOLLOWERS + 2)):$((FOLLOWERS + 3))
        for _ in 1 2 3; do stores="$stores+127.0.0.1:$(free_port)"; done
        stores=${stores#+}
    fi
    nh=$(echo $cands $fols | wc -w)
    case $kind in
    ddprun)
        for h in $cands; do
            host ddprun "$d" "$h" --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$EP" \
                --rdzv_id="fo$ttl-$i" --rdzv_conf="lease_ttl=$ttl,last_call_timeout=$lc"
        done ;;
    stores)
        n=0
        for h in $cands $fols; do
            host ddprun "$d" "$h" --node_rank=$n --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$EP" \
                --rdzv_id="fs$ttl-$i" --rdzv_conf="lease_ttl=$ttl,last_call_timeout=$lc,etcd_stores=$stores"
            n=$((n + 1))
        done ;;
    etcd-v2)
        for h in h1 h2 h3; do
            host torchrun "$d" $h --rdzv_backend=etcd-v2 --rdzv_endpoint="127.0.0.1:$EP" \
                --rdzv_id="fo-v2-$i-$$" --rdzv_conf="last_call_timeout=$TORCH_LAST_CALL_S"
        done ;;
    c10d)
        local cp
        cp=$(free_port)
        host torchrun "$d" h1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$cp" --rdzv_id="fo-c-$i" \
            --rdzv_conf="last_call_timeout=$TORCH_LAST_CALL_S"
        for _ in $(seq 400); do ss -Hltn "sport = :$cp" | grep -q . && break; sleep 0.05; done
        for h in h2 h3; do
            host torchrun "$d" $h --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$cp" --rdzv_id="fo-c-$i" \
                --rdzv_conf="last_call_timeout=$TORCH_LAST_CALL_S"
        done ;;
    esac
    for _ in $(seq $((BOUND_S * 20))); do
        [ "$(live "$d")" -ge "$nh" ] && break
        alive=0
        for h in "${!HPID[@]}"; do kill -0 "${HPID[$h]}" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.05
    done
    if [ "$(live "$d")" -lt "$nh" ]; then
        echo "# $kind ttl $ttl run $i: the job did not start $nh workers: $(tail -1 "$d/h1.out")"
        echo - >>"$TMP/$key.ms"
        for h in "${!HPID[@]}"; do tree "${HPID[$h]}" >/dev/null; wait "${HPID[$h]}" 2>/dev/null; done
        HPID=()
        return 1
    fi
    case $kind in
    ddprun | stores) victim=$(grep -l 'served by this node' "$d"/h?.out | head -1 | xargs -r basename | cut -d. -f1) ;;
    etcd-v2) victim=$(awk '$2 == 0 {print FILENAME}' "$d"/t.* | head -1 | xargs -r basename | cut -d. -f2) ;;
    c10d) victim=h1 ;;
    esac
    if [ -z "$victim" ]; then
        echo "# $kind ttl $ttl run $i: no host serving the store found"
        echo - >>"$TMP/$key.ms"
        return 1
    fi
    sleep 0.$((RANDOM % 10))
    : >"$d/killed"
    read -r tk day <<<"$(tree "${HPID[$victim]}")"
    wait "${HPID[$victim]}" 2>/dev/null
    unset "HPID[$victim]"
    t=""
    for _ in $(seq $((BOUND_S * 50))); do
        t=$(first_after "$d" "$tk")
        [ -n "$t" ] && break
        # every survivor gone: no next round
        n=0
        for h in "${!HPID[@]}"; do kill -0 "${HPID[$h]}" 2>/dev/null && n=$((n + 1)); done
        [ $n = 0 ] && break
        sleep 0.02
    done
    if [ -n "$t" ]; then ms=$(awk -v a="$tk" -v b="$t" 'BEGIN {printf "%.0f", (b - a) / 1e6}'); else ms=-; fi
    echo "$ms" >>"$TMP/$key.ms"
    local rcs=""
    for h in $(printf '%s\n' "${!HPID[@]}" | sort); do
        for _ in $(seq $((BOUND_S * 20))); do kill -0 "${HPID[$h]}" 2>/dev/null || break; sleep 0.05; done
        if kill -0 "${HPID[$h]}" 2>/dev/null; then
            tree "${HPID[$h]}" >/dev/null
            wait "${HPID[$h]}" 2>/dev/null
            rcs="$rcs $h:killed-at-${BOUND_S}s"
        else
            wait "${HPID[$h]}"
            rcs="$rcs $h:$?"
        fi
        # What it printed last: its last error line, else its last line.
        { grep -E '^[A-Za-z.]*(Error|Exception): ' "$d/$h.out" || grep -vE '^\s*$' "$d/$h.out"; } |
            tail -1 | cut -c1-160 >>"$TMP/$key.last"
    done
    HPID=()
    echo "${rcs# }" >>"$TMP/$key.rc"
    if [ "$kind" = ddprun ] || [ "$kind" = stores ]; then
        # shellcheck disable=SC2086 # the host names are words
        phases "$tk" "$day" "$d" "$(echo $cands | tr ' ' '\n' | grep -vx "$victim" | tr '\n' ' ')" "$fols" \
            >>"$TMP/$key.split"
    fi
    find "$d" -maxdepth 1 -name 'ready.*' -newer "$d/killed" | grep -q . && echo ran >>"$TMP/$key.ran"
    echo "# $kind ttl $ttl run $i: killed $victim; next round's first worker after ${ms} ms; exits:$rcs"
}

stats() { # the ms values on stdin ("-" skipped): "median q1 q3 n"
    python3 -c '
import sys
v = sorted(float(x) for x in sys.stdin.read().split() if x != "-")
def q(p):
    if not v: return float("nan")
    k = (len(v) - 1) * p; f = int(k); c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)
print("%.0f %.0f %.0f %d" % (q(0.5), q(0.25), q(0.75), len(v)) if v else "- - - 0")'
}

rc=0
rows=()
each=()
echo "# etcd failover, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), etcd $ETCD_VER, worker $WORKER"
# At a lease_ttl in both TTLS and STORES_TTLS the two kinds take turns, run by run, so that the
# machine's load falls on both alike.
for ttl in $(printf '%s\n' $TTLS $STORES_TTLS | awk '!seen[$0]++'); do
    kinds=""
    [[ " $TTLS " == *" $ttl "* ]] && kinds=ddprun
    [[ " $STORES_TTLS " == *" $ttl "* ]] && kinds="$kinds stores"
    for k in $kinds; do touch "$TMP/$k.$ttl".{ms,rc,last,ran,split}; done
    for i in $(seq "$RUNS"); do
        for k in $kinds; do one "$k" "$ttl" "$i" || rc=1; done
    done
    lc=$LAST_CALL_S
    [ "$ttl" != "$DEFAULT_TTL" ] && lc=$SMALL_LAST_CALL_S
    for k in $kinds; do
        if [ "$k" = ddprun ]; then
            rows+=("ddprun --rdzv_backend=etcd|lease_ttl=$ttl, last_call_timeout=$lc|ddprun.$ttl")
        else
            rows+=("ddprun --rdzv_backend=etcd, etcd_stores: 3 candidates, $FOLLOWERS follower(s)|lease_ttl=$ttl, last_call_timeout=$lc|stores.$ttl")
        fi
        if grep -q -- - "$TMP/$k.$ttl.ms" || grep -vqE '^(h[0-9]+:0 ?)+$' "$TMP/$k.$ttl.rc"; then
            echo "# ddprun ($k) at lease_ttl $ttl: a run did not re-form or did not exit 0"
            rc=1
        fi
    done
done
if [ -n "$TORCH_BACKENDS" ]; then
    TVER=$([ $HAVE_TORCH = 1 ] && "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
    for b in $TORCH_BACKENDS; do
        if [ "$WORKER" != torch ]; then
            echo "# torchrun $b skipped: no PyTorch 2.x (set TORCH_PYTHON, or run scripts/ensure-torch2.sh)"
            continue
        fi
        if [ -z "${ETCD_FAILOVER_PRIVATE:-}" ]; then
            echo "# torchrun $b skipped: scripts/private-names.sh cannot make a mount namespace here"
            continue
        fi
        if [ "$b" = etcd-v2 ] && ! "$PY" -c 'import etcd' 2>/dev/null; then
            echo "# torchrun etcd-v2 skipped: python-etcd is not installed in $PY's environment (scripts/ensure-torch2.sh installs it)"
            continue
        fi
        touch "$TMP/$b.-".{ms,rc,last,ran}
        for i in $(seq "$RUNS"); do one "$b" - "$i"; done
        rows+=("torchrun $TVER --rdzv_backend=$b|last_call_timeout=$TORCH_LAST_CALL_S|$b.-")
    done
fi
echo
echo "| launcher, backend | settings | kill -> first worker of the next round: median | quartiles | runs re-formed | runs whose next round did an allreduce | the survivors' exits | last line printed (one run) |"
echo "|---|---|---:|---|---|---|---|---|"
for r in "${rows[@]}"; do
    IFS='|' read -r name set key <<<"$r"
    read -r med q1 q3 n <<<"$(stats <"$TMP/$key.ms")"
    total=$(wc -l <"$TMP/$key.ms")
    exits=$(tr ' ' '\n' <"$TMP/$key.rc" | cut -d: -f2 | sort | uniq -c | awk '{printf "%s%s x %s", (NR > 1 ? ", " : ""), $2, $1}')
    last=$(sort "$TMP/$key.last" | uniq -c | sort -rn | head -1 | sed -E 's/^ *[0-9]+ //; s/\|/\\|/g')
    ran=-
    [ "$WORKER" = torch ] && ran="$(cat "$TMP/$key.ran" 2>/dev/null | wc -l) of $total"
    q="$q1-$q3 ms"
    [ "$n" = 0 ] && q=-
    echo "| $name | $set | $med ms | $q | $n of $total | $ran | $exits | \`$last\` |"
    each+=("#   $name, $set: $(tr '\n' ' ' <"$TMP/$key.ms")ms")
done
printf '%s\n' "${each[@]}"
each=()
# Each ddprun run's phases (see phases): medians and quartiles over the runs.
echo
echo "| launcher, backend | settings | election (the new leader's line) | next round less the election | slowest surviving candidate's first worker | slowest follower's first worker |"
echo "|---|---|---|---|---|---|"
cell() { # FILE FIELD: "median ms (q1-q3)" of column FIELD of FILE, or "-"
    local med q1 q3 n
    read -r med q1 q3 n <<<"$(cut -d' ' -f"$2" "$1" | stats)"
    if [ "$n" = 0 ]; then echo -; else echo "$med ms ($q1-$q3)"; fi
}
for r in "${rows[@]}"; do
    IFS='|' read -r name set key <<<"$r"
    [ -s "$TMP/$key.split" ] || continue
    awk '{print ($1 == "-" || $2 == "-") ? "-" : $2 - $1, $0}' "$TMP/$key.split" >"$TMP/$key.split2"
    echo "| $name | $set | $(cell "$TMP/$key.split2" 2) | $(cell "$TMP/$key.split2" 1) | $(cell "$TMP/$key.split2" 4) | $(cell "$TMP/$key.split2" 5) |"
    each+=("#   $name, $set: election, round, candidate, follower: $(sed 's/$/ ms;/' "$TMP/$key.split" | tr '\n' ' ')")
done
printf '%s\n' "${each[@]}" | grep 'election, round'
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
