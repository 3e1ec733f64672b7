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
# the first SIGSTOP (the host's death).
tree() {
    python3 - "$1" <<'EOF'
import os, signal, sys, time
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
for p in seen:
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
print(t)
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
            setsid "$BUILD/ddprun" -v --nnodes=2:3 --nproc_per_node=1 --max_restarts=3 "$@" \
            >"$d/$name.out" 2>&1 </dev/null &
    else
        HOST_TAG=$name FAILOVER_DIR=$d GLOO_SOCKET_IFNAME=lo setsid "$PY" -m torch.distributed.run \
            --nnodes=2:3 --nproc_per_node=1 --max_restarts=3 --monitor_interval=0.1 "$@" \
            "$PWD/bench/etcd_failover_worker.py" >"$d/$name.out" 2>&1 </dev/null &
    fi
    HPID[$name]=$!
}
count() { find "$1" -maxdepth 1 -name "$2" | wc -l; }
# first_after DIR NS: the earliest worker start (ns) after NS, or nothing.
first_after() { cat "$1"/t.* 2>/dev/null | awk -v k="$2" '$1 > k && (m == "" || $1 < m) {m = $1} END {if (m != "") print m}'; }

# one KIND TTL RUN: one repetition; appends "ms" to $TMP/KIND.TTL.ms (or "-" when no next round),
# the survivors' exit codes to $TMP/KIND.TTL.rc, their last lines to $TMP/KIND.TTL.last.
one() {
    local kind=$1 ttl=$2 i=$3 d=$TMP/$1.$2.$3 key=$1.$2 victim="" h n tk t ms lc=$LAST_CALL_S
    mkdir -p "$d"
    HPID=()
    [ "$ttl" != - ] && [ "$ttl" != "$DEFAULT_TTL" ] && lc=$SMALL_LAST_CALL_S
    case $kind in
    ddprun)
        for h in h1 h2 h3; do
            host ddprun "$d" $h --rdzv_backend=etcd --rdzv_endpoint="127.0.0.1:$EP" \
                --rdzv_id="fo$ttl-$i" --rdzv_conf="lease_ttl=$ttl,last_call_timeout=$lc"
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
    local want=t.*
    [ "$WORKER" = torch ] && want=ready.*
    for _ in $(seq $((BOUND_S * 20))); do
        [ "$(count "$d" "$want")" -ge 3 ] && break
        alive=0
        for h in "${!HPID[@]}"; do kill -0 "${HPID[$h]}" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.05
    done
    if [ "$(count "$d" "$want")" -lt 3 ]; then
        echo "# $kind ttl $ttl run $i: the job did not start 3 workers: $(tail -1 "$d/h1.out")"
        echo - >>"$TMP/$key.ms"
        for h in h1 h2 h3; do tree "${HPID[$h]}" >/dev/null; wait "${HPID[$h]}" 2>/dev/null; done
        HPID=()
        return 1
    fi
    case $kind in
    ddprun) victim=$(grep -l 'served by this node' "$d"/h?.out | head -1 | xargs -r basename | cut -d. -f1) ;;
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
    tk=$(tree "${HPID[$victim]}")
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
for ttl in $TTLS; do
    touch "$TMP/ddprun.$ttl".{ms,rc,last,ran}
    for i in $(seq "$RUNS"); do one ddprun "$ttl" "$i" || rc=1; done
    lc=$LAST_CALL_S
    [ "$ttl" != "$DEFAULT_TTL" ] && lc=$SMALL_LAST_CALL_S
    rows+=("ddprun --rdzv_backend=etcd|lease_ttl=$ttl, last_call_timeout=$lc|ddprun.$ttl")
    if grep -q -- - "$TMP/ddprun.$ttl.ms" || grep -vqE '^h[0-9]:0 h[0-9]:0$' "$TMP/ddprun.$ttl.rc"; then
        echo "# ddprun at lease_ttl $ttl: a run did not re-form or did not exit 0"
        rc=1
    fi
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
exit $rc
