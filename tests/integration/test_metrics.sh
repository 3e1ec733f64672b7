#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 15
# ddp-rendezvous --metrics: Prometheus' text format over HTTP, scraped while two real agents hold
# a run on the daemon: the page passes `promtool check metrics`, says what is true (2 members in
# the round, their JOINs counted, each node's silence), and a real Prometheus server (Debian's
# prometheus package) scrapes it; the listener answers only GET /metrics and stays bounded.
. "$(dirname "$0")/lib.sh"
DDPRUN=$BIN/ddprun
D=$BIN/ddp-rendezvous
FW=$BIN/tests/fake_worker
fake_worker_env_clear
command -v python3 >/dev/null || { skip "metrics" "python3 is missing"; finish; exit 0; }
PIDS=()
cleanup_pids() { local p; for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup_pids EXIT

"$D" --host 127.0.0.1 --port 0 --no-auth --metrics 127.0.0.1:0 --log-level error \
    >"$TMP/d.out" 2>"$TMP/d.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^metrics on' "$TMP/d.out" 2>/dev/null && break; sleep 0.05; done
PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$TMP/d.out")
MPORT=$(sed -n 's|^metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/d.out")
check "--metrics 127.0.0.1:0: the store and the metrics listener both up, their ports printed" \
    bash -c "[ -n '$PORT' ] && [ -n '$MPORT' ]"

# get PATH [METHOD]: "STATUS" line then the body, from the metrics listener.
get() {
    python3 - "$MPORT" "$1" "${2:-GET}" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request(sys.argv[3], sys.argv[2])
r = c.getresponse()
print(r.status, r.getheader("Content-Type"))
sys.stdout.write(r.read().decode())
PY
}

# Two agents hold a run on the daemon while the page is read.
for n in 0 1; do
    FW_SLEEP_MS=4000 timeout -k 5 30 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint="127.0.0.1:$PORT" --rdzv_id=metrics --rdzv_conf=keep_alive_interval=0.2 \
        "$FW" >"$TMP/agent$n.out" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 100); do
    get /metrics >"$TMP/page" 2>/dev/null
    grep -q 'ddprun_rendezvous_members{run="metrics",set="group"} 2' "$TMP/page" && break
    sleep 0.1
done
check "GET /metrics: 200, text/plain version=0.0.4" \
    grep -q '^200 text/plain; version=0.0.4' "$TMP/page"
check "the page says the truth: 2 members in the run's group, 2+ JOINs, 2 open connections or more" \
    python3 - "$TMP/page" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def value(pat):
    m = re.search("^" + re.escape(pat) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None
assert value('ddprun_rendezvous_members{run="metrics",set="group"}') == 2
assert value('ddprun_store_requests_total{command="RDZV_JOIN"}') >= 2
assert value("ddprun_store_connections") >= 2
assert value("ddprun_rendezvous_runs") == 1
silences = re.findall(r'^ddprun_rendezvous_member_silence_seconds\{run="metrics",.*\} (\S+)$', text, re.M)
assert len(silences) == 2 and all(float(s) < 5 for s in silences), silences
assert value("ddprun_store_memory_bytes") < value("ddprun_store_memory_limit_bytes")
PY
if command -v promtool >/dev/null; then
    sed 1d "$TMP/page" >"$TMP/page.txt"
    promtool check metrics <"$TMP/page.txt" >"$TMP/promtool.out" 2>&1
    check "promtool check metrics: no problem" bash -c "[ $? -eq 0 ] && [ ! -s '$TMP/promtool.out' ]"
    sed 's/^/# /' "$TMP/promtool.out" | head -5
else
    skip "promtool check metrics: no problem" "promtool is missing (apt-get install prometheus)"
fi
get / >"$TMP/root"
get /metrics POST >"$TMP/post"
check "GET / is 404 naming /metrics; POST is 405" \
    bash -c "grep -q '^404' '$TMP/root' && grep -q /metrics '$TMP/root' && grep -q '^405' '$TMP/post'"

# A real Prometheus server scrapes the daemon.
if command -v prometheus >/dev/null; then
    PP=$(free_port)
    cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: ddp-rendezvous
    static_configs:
      - targets: ["127.0.0.1:$MPORT"]
YML
    prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
        --web.listen-address="127.0.0.1:$PP" >"$TMP/prom.out" 2>&1 &
    PIDS+=($!)
    ok_scrape=0
    for _ in $(seq 150); do
        python3 - "$PP" >"$TMP/q" 2>/dev/null <<'PY' && { ok_scrape=1; break; }
import json, sys, urllib.request
u = "http://127.0.0.1:%s/api/v1/query?query=ddprun_store_requests_total%%7Bcommand%%3D%%22RDZV_JOIN%%22%%7D" % sys.argv[1]
r = json.load(urllib.request.urlopen(u, timeout=2))["data"]["result"]
up = "http://127.0.0.1:%s/api/v1/query?query=up" % sys.argv[1]
u2 = json.load(urllib.request.urlopen(up, timeout=2))["data"]["result"]
assert r and float(r[0]["value"][1]) >= 2 and u2 and u2[0]["value"][1] == "1"
print(r[0]["value"][1])
PY
        sleep 0.2
    done
    check "a real Prometheus scrapes it: up == 1, the JOIN counter queryable" [ $ok_scrape = 1 ]
    [ $ok_scrape = 1 ] || tail -5 "$TMP/prom.out" | sed 's/^/# /'
else
    skip "a real Prometheus scrapes it: up == 1, the JOIN counter queryable" \
        "prometheus is missing (apt-get install prometheus)"
fi

# Labels are never cut: two members whose 252-byte host names differ only in their last byte (a
# host may have 255) are two series, each with its whole name.
python3 - "$PORT" "$MPORT" <<'PY' >"$TMP/longhost" 2>&1
import http.client, socket, struct, sys, time
def blob(b):
    return struct.pack("<Q", len(b)) + b
def join(host):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    # JOIN: run id, host, want_node_rank, nproc, master_port, min, max, last_call, join_timeout,
    # keep_alive_interval, keep_alive_max_attempt, max_restarts, min_round, restarts_used,
    # round_keys (none), max_node_failures (0: off).
    nums = [-1, 1, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0]
    s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE))  # VALIDATE (the store runs --no-auth)
    s.sendall(b"\x50" + blob(b"longhosts") + blob(host) + b"".join(struct.pack("<q", v) for v in nums)
              + blob(b"") + struct.pack("<q", 0))
    return s
hosts = [b"h" * 250 + b"-a", b"h" * 250 + b"-b"]
conns = [join(h) for h in hosts]
for _ in range(100):
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[2]), timeout=5)
    c.request("GET", "/metrics")
    page = c.getresponse().read().decode()
    lines = [l for l in page.splitlines()
             if l.startswith("ddprun_rendezvous_member_silence_seconds{") and 'run="longhosts"' in l]
    if len(lines) == 2:
        break
    time.sleep(0.05)
labels = [l.rsplit(" ", 1)[0] for l in lines]
assert len(set(labels)) == 2, labels
for h in hosts:
    assert sum(('host="%s"' % h.decode()) in l for l in lines) == 1, (h, lines)
print("ok")
PY
check "host labels of 252 bytes that differ last: two series, whole names" grep -qx ok "$TMP/longhost"
[ -s "$TMP/longhost" ] && ! grep -qx ok "$TMP/longhost" && tail -3 "$TMP/longhost" | sed 's/^/# /'

# Bounded: 20 idle connections, then a request: the listener still answers; the store serves.
python3 - "$MPORT" "$PORT" <<'PY' >"$TMP/bounded" 2>&1
import http.client, socket, sys
def closed(s):  # EOF, or a reset when our bytes were left unread
    s.settimeout(5)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
big = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
big.sendall(b"GET /" + b"x" * 9000)  # past 8 KiB of header: closed, nothing answered
assert closed(big)
idle = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(20)]
assert closed(idle[0])  # past 16 open connections: the oldest one still sending gives way
for s in idle:
    s.close()
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/metrics")
assert c.getresponse().status == 200
# 16 clients sending half a header block, twice over (a client that reconnects): a scrape still
# gets through at once, long before their 5 s deadline.
slow = []
for _ in range(2):
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=4)
    c.request("GET", "/metrics")
    assert c.getresponse().status == 200
for s in slow:
    s.close()
# A NUL byte in a header gets an answer (400), not silence until the deadline.
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(4)
s.sendall(b"GET /metrics HTTP/1.1\r\nX-A: a\0b\r\n\r\n")
reply = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    reply += d
assert reply.startswith(b"HTTP/1.1 400 "), reply[:40]
socket.create_connection(("127.0.0.1", int(sys.argv[2]))).close()
print("ok")
PY
check "idle, slow and reconnecting clients, a NUL in a header, an 8 KiB+ request: a scrape gets through, the store goes on" \
    grep -qx ok "$TMP/bounded"
grep -qx ok "$TMP/bounded" || tail -3 "$TMP/bounded" | sed 's/^/# /'
# ddprun --metrics HOST:0 says the port it got without -v; a port in use is a usage error (2),
# as a host that does not resolve is.
timeout -k 5 30 "$DDPRUN" --metrics 127.0.0.1:0 --nproc_per_node=1 /bin/true >"$TMP/m0.out" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -qE "serving metrics on http://127\.0\.0\.1:[1-9][0-9]*/metrics" "$TMP/m0.out"
verdict "ddprun --metrics 127.0.0.1:0: the bound port is printed without -v (rc $rc)"
python3 - "$DDPRUN" >"$TMP/inuse.out" 2>&1 <<'PY'
import socket, subprocess, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
r = subprocess.run([sys.argv[1], "--metrics", "127.0.0.1:%d" % s.getsockname()[1],
                    "--nproc_per_node=1", "/bin/true"], capture_output=True, text=True, timeout=30)
lines = r.stderr.strip().splitlines()
assert r.returncode == 2 and len(lines) == 1 and "--metrics" in lines[0] and "in use" in lines[0], (r.returncode, lines)
print("ok")
PY
check "ddprun --metrics on a port in use: exit 2, one line naming the flag" grep -qx ok "$TMP/inuse.out"
for p in "${PIDS[@]:1:2}"; do wait "$p" 2>/dev/null; done
# ddprun --metrics: the agent's workers after its store's metrics. Rank 1 fails the first
# attempt; the page is read while the second one runs.
AP=$(free_port)
FW_EXIT=1 FW_RANK=1 FW_FAIL_ATTEMPTS=1 FW_SLEEP_MS=3000 timeout -k 5 30 "$DDPRUN" --standalone \
    --nproc_per_node=2 --max_restarts=1 --metrics "127.0.0.1:$AP" "$FW" >"$TMP/agentm.out" 2>&1 &
PIDS+=($!)
MPORT=$AP
for _ in $(seq 100); do
    get /metrics >"$TMP/apage" 2>/dev/null
    grep -q 'ddprun_agent_attempt{.*} 1$' "$TMP/apage" && grep -q 'workers_running{.*} 2$' "$TMP/apage" && break
    sleep 0.05
done
check "ddprun --metrics: 2 running, attempt 1, 2 groups started, 1 failure by exit, its store too" \
    python3 - "$TMP/apage" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def value(name, labels=""):
    m = re.search("^" + re.escape(name) + r"\{[^}]*" + re.escape(labels) + r"[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None
assert value("ddprun_agent_workers_running") == 2
assert value("ddprun_agent_attempt") == 1
assert value("ddprun_agent_worker_groups_started_total") == 2
assert value("ddprun_agent_worker_group_failures_total", 'cause="exit"') == 1
assert value("ddprun_agent_worker_group_failures_total", 'cause="hung"') == 0
assert re.search(r"^ddprun_store_connections \d+$", text, re.M)
PY
if command -v promtool >/dev/null; then
    sed 1d "$TMP/apage" | promtool check metrics >"$TMP/apromtool.out" 2>&1
    check "promtool check metrics on ddprun's page: no problem" \
        bash -c "[ $? -eq 0 ] && [ ! -s '$TMP/apromtool.out' ]"
else
    skip "promtool check metrics on ddprun's page: no problem" "promtool is missing"
fi
wait "${PIDS[-1]}"
# The heartbeat age is read when scraped: a worker beating every 0.1 s shows a small age at every
# scrape, from its first beats on (not the age of the hang check's last look, which grows up to
# --heartbeat_timeout, and is missing until that first look).
# The workers beat until the scrapes are done (the stop file), however slow the machine is.
cat >"$TMP/beater.sh" <<EOF
#!/bin/sh
i=0
while [ \$i -lt 250 ] && [ ! -e "$TMP/beat.stop" ]; do
    touch "\$DDPRUN_HEARTBEAT_FILE"; sleep 0.1; i=\$((i + 1))
done
EOF
chmod +x "$TMP/beater.sh"
AP=$(free_port)
timeout -k 5 30 "$DDPRUN" --standalone --nproc_per_node=2 --heartbeat_timeout=10 \
    --metrics "127.0.0.1:$AP" "$TMP/beater.sh" >"$TMP/beat.out" 2>&1 &
PIDS+=($!)
MPORT=$AP
for _ in $(seq 100); do
    get /metrics >"$TMP/bpage" 2>/dev/null && grep -q 'workers_running{.*} 2$' "$TMP/bpage" && break
    sleep 0.05
done
sleep 0.5
ages=""
for _ in $(seq 8); do
    get /metrics >"$TMP/bpage" 2>/dev/null
    ages="$ages $(grep -c '^ddprun_agent_worker_heartbeat_age_seconds{' "$TMP/bpage"):$(sed -n 's/^ddprun_agent_worker_heartbeat_age_seconds{.*} //p' "$TMP/bpage" | sort -n | tail -1)"
    sleep 0.25
done
touch "$TMP/beat.stop"
echo "# heartbeat ages (series:max) per scrape:$ages"
good=1
for a in $ages; do
    [ "${a%%:*}" = 2 ] && awk -v x="${a#*:}" 'BEGIN { exit !(x != "" && x < 3.0) }' || good=0
done
[ $good = 1 ]
verdict "the heartbeat age is read at each scrape: both workers, always under 3 s while beating (timeout 10 s)"
wait "${PIDS[-1]}"
"$D" --no-auth --metrics nonsense >"$TMP/bad.out" 2>&1
check "--metrics nonsense: exit 2 naming the flag" \
    bash -c "[ $? -eq 2 ] && grep -q -- \"--metrics: 'nonsense' is not HOST:PORT\" '$TMP/bad.out'"
cleanup_pids
PIDS=()
check "nothing left running" no_leftovers
finish
