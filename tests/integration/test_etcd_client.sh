#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# suite-cost: 16
# The etcd v3 client (rendezvous/etcd, rdzv_etcd.h) through tests/helpers/etcd_client.c. First a
# hostile gateway (tests/helpers/etcd_hostile.py): garbage, HTTP errors, wrong types, huge
# numbers, an oversized reply or stream line, a silent member, and a missing libcurl: each one
# error line naming the endpoint (or the library), within the timeout. Then a real etcd (Debian's
# etcd-server, started here on 127.0.0.1 alone and stopped by PID): put and get, prefixes, both
# txn branches, lease expiry, keepalive and revoke, a watch that sees puts and a delete, a dead
# first endpoint, close cancelling pending calls, authentication, TLS with client certificates,
# and a stopped etcd named in a bounded error. Without etcd the real-etcd checks are skipped.
. "$(dirname "$0")/lib.sh"

C=$BIN/tests/etcd_client
# The real-etcd checks, as they read when they run (skipped under these names without etcd).
SECTIONS=("put then get" "get with prefix" "txn success branch" "txn failure branch"
    "txn on mod_revision" "txn on value, failure ops" "lease expiry deletes the key"
    "keepalive keeps the key, then it lapses" "revoke deletes the key"
    "revoke of an unknown lease, keepalive of a revoked one: no such key"
    "watch sees puts and a delete in order, then its cancel"
    "dead first endpoint: the second answers"
    "close cancels pending calls before its close callback"
    "authentication: a token opens the calls, none or a wrong password is refused"
    "TLS: a client certificate and the CA open the calls, no certificate is refused"
    "stopped etcd: a bounded error naming the endpoint" "no leftover process")

# run_c NAME ARGS...: runs the helper; its stdout in $TMP/NAME.out, stderr in $TMP/NAME.err,
# exit status in RC.
run_c() {
    local name=$1; shift
    timeout 30 "$C" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    RC=$?
}

# ---- a hostile gateway: needs python3 only ----
python3 "$(dirname "$0")/../helpers/etcd_hostile.py" "$TMP/hostile.port" &
HOSTILE=$!
for _ in $(seq 100); do [ -s "$TMP/hostile.port" ] && break; sleep 0.05; done
HP=$(cat "$TMP/hostile.port" 2>/dev/null)
HE="--endpoints 127.0.0.1:$HP --timeout 2000"
HURL="http://127.0.0.1:$HP"

# hostile NAME EXIT REGEX ARGS...: the call exits EXIT with one stderr line matching REGEX.
hostile() {
    local name=$1 want=$2 re=$3; shift 3
    run_c "h_$name" $HE "$@"
    [ "$RC" -eq "$want" ] && [ "$(wc -l <"$TMP/h_$name.err")" -eq 1 ] &&
        grep -qE "^etcd_client: $HURL$re" "$TMP/h_$name.err"
    verdict "hostile gateway: $name (exit $want, one line naming the endpoint)" ||
        { echo "# exit $RC"; show_tail "$TMP/h_$name.err"; }
}
hostile "garbage JSON" 7 '/v3/kv/range: reply is not JSON' get k
hostile "HTTP 500" 7 '/v3/kv/put: HTTP 500: member is on fire' put k v
hostile "reply over the limit" 8 '/v3/kv/deleterange: the reply passed 16777216 bytes' del k
hostile "wrong type" 7 "/v3/kv/txn: field 'succeeded' is not a boolean" txn-create k v
hostile "int64 out of range" 7 "/v3/lease/revoke: field 'revision' is not an int64" revoke 7
hostile "watch garbage after created" 7 '/v3/watch: reply is not JSON' watch k 0 5
hostile "stream line over the limit" 8 '/v3/lease/keepalive: the reply passed' keepalive 7
t0=$(date +%s%N)
hostile "silent member" 3 '/v3/lease/grant: timed out after 2000 ms' grant 5
t1=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$t1" -lt 4000 ]; verdict "silent member: the error comes within the 2 s timeout (${t1} ms)"
run_c nolib --curl-lib libcurl-missing.so.4 get k
[ "$RC" -eq 9 ] && grep -q 'libcurl-missing.so.4 not loadable (Debian package libcurl4)' \
    "$TMP/nolib.err"
verdict "libcurl missing: one line naming the library and the Debian package" ||
    show_tail "$TMP/nolib.err"
kill "$HOSTILE" 2>/dev/null; wait "$HOSTILE" 2>/dev/null

# ---- a real etcd ----
if ! command -v etcd >/dev/null 2>&1; then
    skip_all "etcd not installed (scripts/ensure-deps.sh --test installs etcd-server)"
fi
P1=$(free_port)
P2=$(free_port)
while [ "$P2" = "$P1" ]; do P2=$(free_port); done
setpriv --pdeathsig KILL etcd --name t --data-dir "$TMP/etcd" \
    --listen-client-urls "http://127.0.0.1:$P1" \
    --advertise-client-urls "http://127.0.0.1:$P1" --listen-peer-urls "http://127.0.0.1:$P2" \
    --initial-advertise-peer-urls "http://127.0.0.1:$P2" \
    --initial-cluster "t=http://127.0.0.1:$P2" >"$TMP/etcd.log" 2>&1 &
ETCD=$!
if ! wait_for "$TMP/etcd.log" 'ready to serve client requests' 20; then
    kill "$ETCD" 2>/dev/null
    skip_all "etcd did not start on 127.0.0.1:$P1"
fi
E="--endpoints 127.0.0.1:$P1"
# field NAME WORD: the word after WORD in $TMP/NAME.out's first line.
field() { awk -v w="$2" 'NR==1 { for (i = 1; i < NF; i++) if ($i == w) print $(i + 1) }' \
    "$TMP/$1.out"; }

run_c put1 $E put /t/a alpha
rev=$(field put1 revision)
run_c get1 $E get /t/a
[ -n "$rev" ] && [ "$rev" -gt 0 ] && grep -qx "count 1 more 0 revision $rev" "$TMP/get1.out" &&
    grep -qx "/t/a alpha create=$rev mod=$rev version=1 lease=0" "$TMP/get1.out"
verdict "put then get" || show_tail "$TMP/get1.out" "$TMP/get1.err"

run_c put2 $E put /t/b beta
run_c put3 $E put /tx other
run_c get2 $E get /t/ prefix
[ "$(sed -n 2,3p "$TMP/get2.out" | awk '{print $1 "=" $2}' | tr '\n' ' ')" = "/t/a=alpha /t/b=beta " ] &&
    grep -q '^count 2 ' "$TMP/get2.out"
verdict "get with prefix" || show_tail "$TMP/get2.out" "$TMP/get2.err"

run_c txn1 $E txn-create /t/c one
run_c get3 $E get /t/c
grep -q '^succeeded 1 ' "$TMP/txn1.out" && grep -q '^/t/c one ' "$TMP/get3.out"
verdict "txn success branch" || show_tail "$TMP/txn1.out" "$TMP/txn1.err"
run_c txn2 $E txn-create /t/c two
run_c get4 $E get /t/c
grep -q '^succeeded 0 ' "$TMP/txn2.out" && grep -q '^/t/c one ' "$TMP/get4.out"
verdict "txn failure branch" || show_tail "$TMP/txn2.out" "$TMP/txn2.err"
mod=$(awk 'NR==2 { sub("mod=", "", $4); print $4 }' "$TMP/get4.out")
run_c txn3 $E txn-mod /t/c $((mod + 1)) three
run_c txn4 $E txn-mod /t/c "$mod" four
run_c get5 $E get /t/c
grep -q '^succeeded 0 ' "$TMP/txn3.out" && grep -q '^succeeded 1 ' "$TMP/txn4.out" &&
    grep -q '^/t/c four ' "$TMP/get5.out"
verdict "txn on mod_revision" || show_tail "$TMP/txn3.out" "$TMP/txn4.out" "$TMP/get5.out"
run_c txn5 $E txn-value /t/c four five
run_c txn6 $E txn-value /t/c four six
run_c get6 $E get /t/c
grep -q '^succeeded 1 ' "$TMP/txn5.out" && grep -q '^succeeded 0 ' "$TMP/txn6.out" &&
    grep -q '^count 0 ' "$TMP/get6.out"
verdict "txn on value, failure ops" || show_tail "$TMP/txn6.out" "$TMP/get6.out"

run_c grant1 $E grant 2
lease=$(field grant1 lease)
run_c put4 $E put /t/leased x "$lease"
run_c get7 $E get /t/leased
grep -q "lease=$lease\$" "$TMP/get7.out" && [ "$(field grant1 ttl)" = 2 ] && sleep 3.5 &&
    run_c get8 $E get /t/leased && grep -q '^count 0 ' "$TMP/get8.out"
verdict "lease expiry deletes the key" || show_tail "$TMP/get7.out" "$TMP/get8.out"

run_c grant2 $E grant 2
lease=$(field grant2 lease)
run_c put5 $E put /t/kept x "$lease"
run_c keep $E keep "$lease" 4
run_c get9 $E get /t/kept
kept=$(field keep kept)
[ "${kept:-0}" -ge 6 ] && grep -q '^count 1 ' "$TMP/get9.out" && sleep 3.5 &&
    run_c get10 $E get /t/kept && grep -q '^count 0 ' "$TMP/get10.out"
echo "# keepalive: ${kept:-0} renewals over 4 s at TTL 2"
verdict "keepalive keeps the key, then it lapses" ||
    show_tail "$TMP/keep.out" "$TMP/keep.err" "$TMP/get9.out"

run_c grant3 $E grant 60
lease=$(field grant3 lease)
run_c put6 $E put /t/revoked x "$lease"
run_c revoke1 $E revoke "$lease"
run_c get11 $E get /t/revoked
grep -q '^revoked ' "$TMP/revoke1.out" && grep -q '^count 0 ' "$TMP/get11.out"
verdict "revoke deletes the key" || show_tail "$TMP/revoke1.err" "$TMP/get11.out"
run_c revoke2 $E revoke "$lease"
run_c keepalive2 $E keepalive "$lease"
[ "$RC" -eq 5 ] && grep -q "/v3/lease/keepalive: lease $lease expired or unknown" \
    "$TMP/keepalive2.err" && grep -q "HTTP 404: etcdserver: requested lease not found" \
    "$TMP/revoke2.err"
verdict "revoke of an unknown lease, keepalive of a revoked one: no such key" ||
    show_tail "$TMP/revoke2.err" "$TMP/keepalive2.err"

run_c put7 $E put /w/x 0
rev=$(field put7 revision)
timeout 20 "$C" $E watch /w/ $((rev + 1)) 3 prefix >"$TMP/watch.out" 2>"$TMP/watch.err" &
WATCH=$!
wait_for "$TMP/watch.out" '^created' 5 >/dev/null
run_c put8 $E put /w/x 1
run_c put9 $E put /w/y 2
run_c del1 $E del /w/x
wait "$WATCH"
wrc=$?
[ "$wrc" -eq 0 ] && [ "$(grep -vc '^created' "$TMP/watch.out")" -eq 4 ] &&
    grep -qx "PUT /w/x 1 $((rev + 1))" "$TMP/watch.out" &&
    grep -qx "PUT /w/y 2 $((rev + 2))" "$TMP/watch.out" &&
    grep -qx "DELETE /w/x - $((rev + 3))" "$TMP/watch.out" && tail -1 "$TMP/watch.out" | grep -qx canceled
verdict "watch sees puts and a delete in order, then its cancel" ||
    show_tail "$TMP/watch.out" "$TMP/watch.err"

DEAD=$(free_port)
run_c dead $E get /t/a
run_c dead --endpoints "127.0.0.1:$DEAD,127.0.0.1:$P1" get /t/a
[ "$RC" -eq 0 ] && grep -q '^/t/a alpha ' "$TMP/dead.out"
verdict "dead first endpoint: the second answers" || show_tail "$TMP/dead.err"

run_c cancel $E close-pending /t/a
[ "$RC" -eq 0 ] && [ "$(sed -n 3p "$TMP/cancel.out")" = "closed after 2 cancels" ] &&
    grep -q "^get: canceled (http://127.0.0.1:$P1/v3/kv/range: canceled" "$TMP/cancel.out"
verdict "close cancels pending calls before its close callback" || show_tail "$TMP/cancel.out"

# Authentication, through the gateway itself: a root user and role, then auth on.
gw() { curl -s --noproxy '*' -m 5 "http://127.0.0.1:$P1$1" -d "$2"; }
gw /v3/auth/user/add '{"name":"root","password":"pw"}' >/dev/null
gw /v3/auth/role/add '{"name":"root"}' >/dev/null
gw /v3/auth/user/grant '{"user":"root","role":"root"}' >/dev/null
gw /v3/auth/enable '{}' >"$TMP/auth.enable"
run_c auth1 $E --user root --password pw put /t/auth yes
run_c auth2 $E --user root --password pw get /t/auth
run_c auth3 $E get /t/auth
rc3=$RC
run_c auth4 $E --user root --password wrong get /t/auth
[ "$rc3" -eq 4 ] && grep -q '^/t/auth yes ' "$TMP/auth2.out" && [ "$RC" -eq 4 ] &&
    grep -q "/v3/auth/authenticate: HTTP 400: etcdserver: authentication failed" "$TMP/auth4.err"
verdict "authentication: a token opens the calls, none or a wrong password is refused" ||
    { cat "$TMP/auth.enable"; echo; show_tail "$TMP/auth1.err" "$TMP/auth3.err" "$TMP/auth4.err"; }

# TLS: a second etcd on https with client certificates (a CA, a server and a client certificate
# made here; the server's names 127.0.0.1). etcd's gateway reaches its own gRPC server with the
# server's certificate, so that one is a client certificate too.
tls_ok=0
mkcert() { # NAME CN EXT: a key and a certificate signed by the CA
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$TMP/$1.key" \
        -out "$TMP/$1.csr" -subj "/CN=$2" 2>/dev/null &&
        printf '%s\n' "$3" >"$TMP/$1.ext" &&
        openssl x509 -req -in "$TMP/$1.csr" -CA "$TMP/ca.crt" -CAkey "$TMP/ca.key" \
            -CAcreateserial -days 1 -extfile "$TMP/$1.ext" -out "$TMP/$1.crt" 2>/dev/null
}
if command -v openssl >/dev/null 2>&1 &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
        -keyout "$TMP/ca.key" -out "$TMP/ca.crt" -subj /CN=ddprun-test-ca 2>/dev/null &&
    mkcert srv 127.0.0.1 "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth" && mkcert cli client "extendedKeyUsage=clientAuth"; then
    P3=$(free_port)
    P4=$(free_port)
    setpriv --pdeathsig KILL etcd --name s --data-dir "$TMP/etcd-tls" \
        --listen-client-urls "https://127.0.0.1:$P3" \
        --advertise-client-urls "https://127.0.0.1:$P3" --listen-peer-urls "http://127.0.0.1:$P4" \
        --initial-advertise-peer-urls "http://127.0.0.1:$P4" \
        --initial-cluster "s=http://127.0.0.1:$P4" --cert-file "$TMP/srv.crt" \
        --key-file "$TMP/srv.key" --client-cert-auth --trusted-ca-file "$TMP/ca.crt" \
        >"$TMP/etcd-tls.log" 2>&1 &
    ETCD_TLS=$!
    if wait_for "$TMP/etcd-tls.log" 'ready to serve client requests' 20 >/dev/null; then
        T="--endpoints 127.0.0.1:$P3 --ca $TMP/ca.crt"
        run_c tls1 $T --cert "$TMP/cli.crt" --key "$TMP/cli.key" put /t/tls yes
        run_c tls2 $T --cert "$TMP/cli.crt" --key "$TMP/cli.key" get /t/tls
        run_c tls3 $T get /t/tls
        rc3=$RC
        grep -q '^/t/tls yes ' "$TMP/tls2.out" && [ "$rc3" -ne 0 ] &&
            grep -q "^etcd_client: https://127.0.0.1:$P3/v3/kv/range: " "$TMP/tls3.err"
        verdict "TLS: a client certificate and the CA open the calls, no certificate is refused" ||
            show_tail "$TMP/tls1.err" "$TMP/tls2.out" "$TMP/tls3.err" "$TMP/etcd-tls.log"
        tls_ok=1
    fi
    kill -TERM "$ETCD_TLS"
    wait "$ETCD_TLS" 2>/dev/null
fi
[ "$tls_ok" = 1 ] ||
    skip "TLS: a client certificate and the CA open the calls, no certificate is refused" \
        "no openssl, or the TLS etcd did not start"

kill -TERM "$ETCD"
wait "$ETCD" 2>/dev/null
t0=$(date +%s%N)
run_c stopped $E --timeout 1500 get /t/a
t1=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$RC" -eq 6 ] && [ "$t1" -lt 3000 ] &&
    grep -q "^etcd_client: http://127.0.0.1:$P1/v3/kv/range: unable to connect" "$TMP/stopped.err"
echo "# stopped etcd: the error came after ${t1} ms"
verdict "stopped etcd: a bounded error naming the endpoint" || show_tail "$TMP/stopped.err"

check "no leftover process" no_leftovers 3
finish
