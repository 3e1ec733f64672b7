#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fault-injection campaign (docs/RELIABILITY.md): three hosts made of network namespaces, each
running a ddprun agent of one `train` job (2 workers a host, world 6, CPU collectives over TCP
between the hosts, checkpoints in a directory every host shares), the store either a standalone
ddp-rendezvous on a fourth namespace, embedded in host a's agent, or (--rdzv_backend=etcd, one
etcd member on the fourth namespace) embedded in the agent the hosts elect: every agent a candidate,
or (--rdzv_conf etcd_stores) two store candidates at known addresses and a follower that never
talks to etcd. A seeded random schedule
injects, at random moments (rendezvous, start-up, training, checkpoint writing, the exit
barrier): worker SIGKILL, worker SIGSTOP (a hang), agent SIGKILL followed by the host starting
its agent again (as Slurm's requeue would), a link flap shorter than the keep-alive bound (must
cost nothing), a link down for longer (the node is dropped, then rejoins), the standalone
daemon SIGKILLed and started again on its address, the host that serves the store on etcd
SIGKILLed whole (its agent and workers; the host then starts its agent again), a sick node
(its workers SIGKILLed, then its next 1 or 2 group starts fail at once: sick_node.py), and a slow
node (its workers SIGSTOP/SIGCONT duty-cycled for 3.5 to 5 s: slow_node.py). The agents run with
max_node_failures=2 at the minimum node count (--nnodes=3), so a host that fails again and again
is counted but must stay.

After every job: each host's agent exits 0; rank 0's final parameters are bitwise those of a clean
run of the same shape and seed; every fault was detected within its bound (recovery times are
reported per kind); a flap cost no restart; no process is left in any namespace and nothing of
ddprun's in /dev/shm; no checkpoint was found torn; the daemon's memory accounting and each
agent's open descriptors do not grow from round to round; the daemon never ends unless the
schedule kills it (how it ended, and where its core went, is reported); no host is excluded, and
from a host's second failure on, the round's end says it stays; a slow node is named a straggler
within its bound, and no host is named one outside a slow_node fault on it; every host's last
agent reports its goodput.

Exit status 0 when every invariant held, 1 when one did not (each broken one is printed), 77 when
it cannot run here (not root, no `ip netns`). The seed is printed first: `--seed N` replays a
campaign's schedule exactly (the moments the faults land in depend on the machine's timing), and
`--seed N --job K` replays job K of it alone. `--kinds` injects only the kinds named.
Everything it starts is its own, ended by PID; nothing leaves the namespaces it makes.
"""
import argparse
import calendar
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import sick_node
import slow_node
from hosts import (Net, children, comm, die_with_campaign, env_of, exit_text, fd_kinds,
                   proc_state, rss_kb, shm_entries, with_core_dumps, zombie)

KINDS = ["worker_kill", "worker_stop", "agent_kill", "link_flap", "link_down", "store_restart",
         "sick_node", "store_host_kill", "slow_node"]
# The variants, in the order the jobs take them (job 0 first): the store a standalone daemon; the
# agents' elected through etcd with two store candidates at known addresses and a follower
# (etcd_stores); host a's agent's; elected through etcd with every agent a candidate. A one-minute
# campaign (make test) runs the first two: the candidates' election is etcd's as in the last
# variant, and the follower is what etcd_stores adds. The kinds only some variants have, and the
# share of --per-job their jobs carry (the campaign asks share / 2 of --min-per-kind of them):
# the daemon's restarts carry the other variants' share; a store host kill costs its job a lease
# TTL and a re-formed round (3 to 6 s), so the etcd jobs carry 0.6 of a share, which keeps the
# one-minute campaign about as long as it was.
VARIANTS = ["daemon", "etcd_stores", "embedded", "etcd"]
ETCD_VARIANTS = ("etcd", "etcd_stores")
ONLY_IN = {"store_restart": (("daemon",), 2.0), "store_host_kill": (ETCD_VARIANTS, 0.6)}
# Kinds every variant has, at a share of --per-job (and half that share of --min-per-kind: a job
# may end before its last one found the job steady): a slow node holds the schedule still for
# about 6 s (its duration and its bound, so that the straggler verdict is its alone).
SHARE = {"slow_node": 0.2}


def min_count(kind, min_per_kind):
    """How many faults of kind the campaign injects at least."""
    if kind in SHARE:
        return math.ceil(min_per_kind * SHARE[kind] / 2)
    return math.ceil(min_per_kind * ONLY_IN.get(kind, (None, 2.0))[1] / 2)
ETCD_PORT = 2379
# etcd_stores: the first two hosts of a job's order (drawn per job) are the store candidates, node
# ranks 0 and 1, serving at PORT on their addresses; the third is a follower (node rank 2), given
# an etcd endpoint where no host answers: one that asked etcd would never join.
STORE_CANDIDATES = 2
NOBODY = 99
# The etcd backend's lease: a flap (at most 0.8 s, answered by 1.4 s) never costs the serving
# agent its lease (keepalives every TTL/3).
LEASE_TTL = 3
HOSTS = ["a", "b", "c"]
NPROC = 2
PORT = 29400

# Keep-alive: a node silent for KA_INTERVAL x KA_ATTEMPTS is dead. A flap must stay well inside the
# bound: TCP retransmits after 0.2, 0.6, 1.4 s, so a 0.8 s outage is over by 1.4 s, plus one
# interval before the next heartbeat.
KA_INTERVAL = 0.4
KA_ATTEMPTS = 6
KA_BOUND = KA_INTERVAL * KA_ATTEMPTS
FLAP_S = (0.2, 0.8)
DOWN_S = (1.5 * KA_BOUND, 2.5 * KA_BOUND)
# After a link, an agent or the daemon is back, reconnecting takes up to this long (the store
# client's connect tries double from 250 ms to 4 s while nothing answers): a JOIN parked on a
# connection the outage broke may still make a round the host never hears of meanwhile.
SETTLE_S = 4.0
HB_TIMEOUT = 3          # --heartbeat_timeout: above any flap's delay of one step (1.4 s)
HB_INITIAL = 12         # --initial_heartbeat_timeout: start-up on a loaded 2-core machine
SHUTDOWN_TIMEOUT = 2
STACKS_TIMEOUT = 3
# What a loaded 2-core machine may add to a detection bound (scheduling, the poll below).
SLACK = 1.5
POLL = 0.05
# A sick node fails its next 1 or 2 group starts. Quarantine is on (rdzv_conf max_node_failures):
# with --nnodes=3 the job is always at its minimum, so a host that reaches the bound must stay.
SICK_STARTS = (1, 2)
MAX_NODE_FAILURES = 2
# A start that fails at once: the agent reaps the worker, the store ends the round everywhere.
SICK_BOUND = 1.0 + SLACK

TRAIN_ARGS = ["--epochs", "4", "--samples", "6144", "--batch-size", "32", "--layers",
              "32,64,10", "--checkpoint-every", "1", "--keep", "3", "--check-sync", "--seed",
              "11", "--data-seed", "5", "--backend", "cpu", "--step-delay-ms", "80",
              "--eval-samples", "0", "--log-every", "1000"]
# --eval-samples 0: rank 0's evaluation would count as its compute (slow_node.py).


def now():
    return time.monotonic()


def log(msg):
    print(f"# {msg}", flush=True)


class Job:
    """One run of `train` on the three hosts, under faults or clean."""

    def __init__(self, camp, name, variant, faults, rng):
        self.c, self.name, self.variant, self.rng = camp, name, variant, rng
        # Unique on the machine (the campaign's pid), made of characters that stay as they are
        # in ddprun's file names: /dev/shm is judged by it.
        self.run_id = f"chaos{os.getpid()}-{name}"
        self.dir = os.path.join(camp.tmp, name)
        os.makedirs(self.dir)
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.makedirs(self.ckpt, mode=0o700)
        self.params = os.path.join(self.dir, "params.bin")
        self.plan = faults          # kinds still to inject, in order
        self.injected = []          # dicts: kind, host, t, ...
        self.agent = {}             # host -> Popen of the running incarnation
        self.final = {}             # host -> exit status of the agent that ended the job there
        self.restart_at = {}        # host -> when the killed agent starts again
        self.started_at = {}        # host -> when its running agent was started
        self.shm_of = {}            # host -> (agent pid, the scratch directory its workers name)
        self.link_up_at = {}        # host -> when its link comes back
        self.settle_until = 0.0     # what was brought back reconnects until then (SETTLE_S)
        self.daemon = None
        self.etcd = None
        self.daemon_up_at = None
        self.daemon_ended = None    # (t, returncode) when the daemon ended without a fault
        self.daemon_samples = []    # (t, mem_used, rss_kb) at each new round
        self.fd_samples = {}        # (host, agent pid, serving) -> [fd counts at each new round]
        self.quiet_until = 0.0      # no fault before this (a flap's window)
        self.stopped = set()        # SIGSTOPped workers not yet gone
        self.rounds_seen = -1
        self.ev, self.ev_off, self.ev_sorted = [], {}, True  # events() reads on from ev_off
        self.starts = {}            # round -> hosts that started a group of it (events())
        self.calm = {}              # (host, round) -> no other fault in effect at that start
        self.slow_threads, self.halt = slow_node.state()  # the duty cycling, its end
        self.problems = []          # (invariant, text)
        self.rank = {}              # etcd_stores: host -> node rank (candidates first)
        if variant == "etcd_stores":
            order = list(HOSTS)
            rng.shuffle(order)
            self.rank = {h: i for i, h in enumerate(order)}

    def on_etcd(self):
        return self.variant in ETCD_VARIANTS

    def problem(self, invariant, text):
        self.problems.append((invariant, text))

    # ------------------------------------------------------------------ processes
    def endpoint(self, h):
        if self.rank.get(h, 0) >= STORE_CANDIDATES:
            return f"{self.c.net.sub}.{NOBODY}:{ETCD_PORT}"
        if self.on_etcd():
            return f"{self.c.net.addr['s']}:{ETCD_PORT}"
        return f"{self.c.net.addr['s' if self.variant == 'daemon' else 'a']}:{PORT}"

    def start_etcd(self):
        """One etcd member on the store's host (etcd's own outages are not a fault here)."""
        a, out = self.c.net.addr["s"], os.path.join(self.dir, "etcd.log")
        f = open(out, "a")
        self.etcd = subprocess.Popen(
            self.c.net.cmd("s", ["etcd", "--name", "one", "--data-dir",
                                 os.path.join(self.dir, "etcd"), "--listen-client-urls",
                                 f"http://{a}:{ETCD_PORT}", "--advertise-client-urls",
                                 f"http://{a}:{ETCD_PORT}", "--listen-peer-urls",
                                 f"http://{a}:{ETCD_PORT + 1}", "--initial-advertise-peer-urls",
                                 f"http://{a}:{ETCD_PORT + 1}", "--initial-cluster",
                                 f"one=http://{a}:{ETCD_PORT + 1}"]),
            stdout=f, stderr=subprocess.STDOUT, preexec_fn=die_with_campaign, cwd=self.dir)
        f.close()
        end = now() + 20
        while now() < end and self.etcd.poll() is None:
            with open(out) as g:
                if "ready to serve client requests" in g.read():
                    return
            time.sleep(POLL)
        raise RuntimeError(f"etcd did not start: {open(out).read()[-500:]}")

    def store_host(self):
        """The host whose agent serves the store now (etcd): the last election each agent
        logged, where it said it serves and it still runs; None when none does."""
        last = {}
        for e in self.events():
            # Only the running incarnation's word counts (a killed one's file goes on).
            if e["event"] == "rendezvous_store_elected" and \
                    e["_t"] >= self.started_at.get(e["_host"], 0) - 0.05:
                last[e["_host"]] = e
        serving = [(e["_t"], h) for h, e in last.items() if e.get("self") and
                   self.agent[h].poll() is None and h not in self.restart_at]
        return max(serving)[1] if serving else None

    def start_daemon(self):
        out = os.path.join(self.dir, "daemon.out")
        with open(out, "a") as f:
            f.write(f"--- started {now():.3f}\n")
        f = open(out, "a")
        self.daemon = subprocess.Popen(
            # -v: the daemon logs why each round ended (the quarantine invariant reads it).
            self.c.net.cmd("s", [self.c.rdzv, "--host", "0.0.0.0", "--port", str(PORT),
                                 "--token-file", self.c.token, "-v"]),
            stdout=f, stderr=subprocess.STDOUT, preexec_fn=with_core_dumps, cwd=self.dir)
        f.close()
        end = now() + 10
        while now() < end:
            with open(out) as g:
                text = g.read()
            if text.count("listening on") >= text.count("--- started"):
                return
            if self.daemon.poll() is not None:
                break
            time.sleep(POLL)
        raise RuntimeError(f"ddp-rendezvous did not start: {open(out).read()[-500:]}")

    def daemon_stats(self):
        r = subprocess.run(self.c.net.cmd("s", [self.c.store_client, str(PORT), "stats"]),
                           capture_output=True, text=True, timeout=10,
                           env={**os.environ, "DDPRUN_TOKEN_FILE": self.c.token})
        m = re.search(r"^mem_used (\d+)$", r.stdout, re.M)
        return int(m.group(1)) if m else None

    def start_agent(self, h):
        conf = (f"last_call_timeout=0.3,join_timeout=90,keep_alive_interval={KA_INTERVAL},"
                f"keep_alive_max_attempt={KA_ATTEMPTS},close_timeout=30,"
                f"store_reconnect_timeout=60,max_node_failures={MAX_NODE_FAILURES}")
        backend = "etcd" if self.on_etcd() else "c10d"
        if backend == "etcd":
            conf += f",lease_ttl={LEASE_TTL}"
        ranks = []
        if self.rank:
            cands = sorted((r, x) for x, r in self.rank.items() if r < STORE_CANDIDATES)
            conf += ",etcd_stores=" + "+".join(f"{self.c.net.addr[x]}:{PORT}" for _, x in cands)
            ranks = [f"--node_rank={self.rank[h]}"]
        argv = [self.c.ddprun, "--nnodes=3", f"--nproc_per_node={NPROC}", *ranks,
                f"--rdzv_backend={backend}", f"--rdzv_endpoint={self.endpoint(h)}",
                f"--rdzv_id={self.run_id}",
                f"--rdzv_conf={conf}", "--max_restarts=100000",
                f"--heartbeat_timeout={HB_TIMEOUT}", f"--initial_heartbeat_timeout={HB_INITIAL}",
                f"--shutdown_timeout={SHUTDOWN_TIMEOUT}", f"--stacks_timeout={STACKS_TIMEOUT}",
                *slow_node.flags(),
                f"--event_log_handler=json:{os.path.join(self.dir, h + '.events')}",
                "--log_dir", os.path.join(self.dir, "logs-" + h),
                "/bin/sh", self.c.wrapper, sick_node.marker(self.dir, h),
                self.c.train, *TRAIN_ARGS, "--checkpoint-dir", self.ckpt,
                "--dump-params", self.params]
        f = open(os.path.join(self.dir, h + ".out"), "a")
        f.write(f"--- agent started {now():.3f}\n")
        self.started_at[h] = now()
        f.flush()
        env = {**os.environ, "DDPRUN_TOKEN_FILE": self.c.token}
        self.agent[h] = subprocess.Popen(self.c.net.cmd(h, argv), stdout=f,
                                         stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=die_with_campaign)
        f.close()

    def workers(self, h):
        p = self.agent.get(h)
        if p is None or p.poll() is not None:
            return []
        ws = [c for c in children(p.pid) if comm(c) == "train"]
        # The agent's scratch directory, read once per agent from a worker's environment: a
        # store_host_kill between two groups finds no worker to ask.
        if ws and self.shm_of.get(h, (None,))[0] != p.pid:
            d = env_of(ws[0]).get(b"DDPRUN_SHM_DIR", b"").decode()
            if d:
                self.shm_of[h] = (p.pid, d)
        return ws

    # ------------------------------------------------------------------ events
    def events(self):
        """Every host's events so far, in time order. Files are read from where the last call
        stopped (this runs every poll: the agents must not wait for the campaign's CPU)."""
        for h in HOSTS:
            path = os.path.join(self.dir, h + ".events")
            try:
                with open(path, "rb") as f:
                    f.seek(self.ev_off.get(h, 0))
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # whole lines only: an agent may be writing one
            self.ev_off[h] = self.ev_off.get(h, 0) + end
            for line in data[:end].splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    self.problem("job", f"{h}: an event line is not JSON: {line[:80]!r}")
                    continue
                e["_host"] = h
                e["_t"] = self.c.wall_to_mono(e["ts"])
                self.ev.append(e)
                if e["event"] == "worker_group_started":
                    self.starts[e["round"]] = self.starts.get(e["round"], 0) + 1
                    self.calm[(h, e["round"])] = self.calm_now()
                self.ev_sorted = False
        if not self.ev_sorted:
            self.ev.sort(key=lambda e: e["_t"])
            self.ev_sorted = True
        return self.ev

    def calm_now(self):
        """Whether nothing that slows the news of a failure is in effect now (a link down, an
        agent or the daemon away or back less than SETTLE_S ago, a stopped worker not yet
        found): a sick start's detection bound holds then."""
        if (self.link_up_at or self.restart_at or self.daemon_up_at is not None
                or now() < self.settle_until):
            return False
        return not any(comm(p) and not zombie(p) for p in self.stopped)

    def group_rounds(self, ev):
        """host -> [(t, round)] of worker_group_started."""
        out = {h: [] for h in HOSTS}
        for e in ev:
            if e["event"] == "worker_group_started":
                out[e["_host"]].append((e["_t"], e["round"]))
        return out

    def steady_since(self):
        """When all three hosts last started the same, newest round; None when they are not in
        one (a rendezvous, a restart, a lost node)."""
        ev = self.events()
        g = self.group_rounds(ev)
        last = {h: (g[h][-1] if g[h] else None) for h in HOSTS}
        if any(v is None for v in last.values()):
            return None
        rounds = {v[1] for v in last.values()}
        if len(rounds) != 1:
            return None
        since = max(v[0] for v in last.values())
        # Nothing ended since then on any host.
        for e in ev:
            if e["_t"] > since and e["event"] in ("rendezvous_round_ended", "rendezvous_store_lost",
                                                  "worker_exited", "worker_hung", "shutdown"):
                return None
        if any(len(self.workers(h)) != NPROC for h in HOSTS):
            return None
        return since

    # ------------------------------------------------------------------ faults
    def inject(self, kind):
        t = now()
        # In a running round (else a node can only be missed once the others start one).
        steady = self.steady_since() is not None
        rec = {"kind": kind, "t": t, "steady": steady,
               # No other fault in effect, and the job running: its detection bound is checked.
               # Overlapping faults hide each other (a daemon killed behind a link that is down
               # closes nothing; agents still reconnecting have nothing to lose).
               "isolated": steady and not self.link_up_at and not self.restart_at
               and self.daemon_up_at is None}
        if kind in ("worker_kill", "worker_stop"):
            running = {h: self.workers(h) for h in HOSTS}  # read once: a group may end now
            hosts = [h for h in HOSTS if running[h]]
            if not hosts:
                return None
            h = self.rng.choice(hosts)
            pid = self.rng.choice(running[h])
            # A process in uninterruptible sleep (an fsync of a checkpoint on a busy disk) acts
            # on SIGKILL only when its system call returns: its bound starts then, not now.
            rec.update(host=h, pid=pid, beaten=self.beaten(pid), state=proc_state(pid))
            try:
                os.kill(pid, signal.SIGKILL if kind == "worker_kill" else signal.SIGSTOP)
            except ProcessLookupError:
                return None
            if kind == "worker_stop":
                self.stopped.add(pid)
        elif kind == "agent_kill":
            # Not the agent that serves the store: that is store_host_kill's (etcd), or the end
            # of the job (host a's embedded store).
            serving = "a" if self.variant == "embedded" else self.store_host()
            hosts = [h for h in HOSTS if self.agent.get(h) and self.agent[h].poll() is None
                     and h != serving]
            if not hosts:
                return None
            h = self.rng.choice(hosts)
            rec.update(host=h, pid=self.agent[h].pid)
            self.agent[h].kill()
            self.agent[h].wait()
            self.restart_at[h] = t + self.rng.uniform(0.3, 1.5)
        elif kind == "store_host_kill":
            # Everything of the serving agent at once, its workers included; the host comes
            # back after a while, as a requeued node would. While its workers run: they name
            # its scratch directory.
            h = self.store_host()
            if h is None or not self.workers(h):
                return None
            pids, todo = [], [self.agent[h].pid]
            while todo:
                p = todo.pop()
                pids.append(p)
                todo += children(p)
            shm = {env_of(p).get(b"DDPRUN_SHM_DIR", b"").decode() for p in pids} - {""}
            if self.shm_of.get(h, (None,))[0] == self.agent[h].pid:
                shm.add(self.shm_of[h][1])  # its workers may be between two groups now
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.agent[h].wait()
            # A dead host's memory goes with it: its scratch directory in /dev/shm (one /dev/shm
            # for every namespace here) is gone as it would be with the host.
            for d in shm:
                shutil.rmtree(d, ignore_errors=True)
            rec.update(host=h, pid=self.agent[h].pid, pids=pids, shm=sorted(shm))
            self.restart_at[h] = t + self.rng.uniform(0.3, 1.5)
        elif kind in ("link_flap", "link_down"):
            # With etcd: not etcd's host (its outages are not a fault here), and no link down
            # of the serving agent's, which ends its lease and so its agent (exit 1).
            hosts = [h for h in self.c.net.addr if h not in self.link_up_at
                     and (h != "s" or self.variant == "daemon")
                     and not (kind == "link_down" and h == self.store_host())]
            if not hosts:
                return None
            h = self.rng.choice(hosts)
            dur = self.rng.uniform(*(FLAP_S if kind == "link_flap" else DOWN_S))
            self.c.net.link(h, False)
            self.link_up_at[h] = t + dur
            rec.update(host=h, dur=dur)
            if kind == "link_flap":
                self.quiet_until = max(self.quiet_until, t + dur + KA_BOUND + 0.5)
        elif kind == "sick_node":
            # The node falls sick under its running workers (they die, as on a GPU's fatal
            # error) and its next group starts fail at once until it heals.
            hosts = [h for h in HOSTS if not os.path.exists(sick_node.marker(self.dir, h))]
            if not hosts:
                return None
            h = self.rng.choice(hosts)
            starts = self.rng.randint(*SICK_STARTS)
            log_off = sick_node.make_sick(sick_node.marker(self.dir, h), starts)
            pids = self.workers(h)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            rec.update(host=h, starts=starts, pids=pids, log_off=log_off)
        elif kind == "slow_node":
            # Only in a job steady for a while with nothing pending and no rank named: the
            # verdict is then this fault's alone. Nothing else is injected while it lasts.
            if not self.flap_window_ok(t) or not slow_node.inject(self, rec, HOSTS, SLACK):
                return None
        elif kind == "store_restart":
            if self.daemon is None or self.daemon.poll() is not None or self.daemon_ended:
                return None
            rec.update(host="s", pid=self.daemon.pid)
            self.daemon.kill()
            self.daemon.wait()
            self.daemon_up_at = t + self.rng.uniform(0.2, 2.0)
        rec["round"] = self.rounds_seen
        self.injected.append(rec)
        self.log_fault(rec)
        return rec

    def log_fault(self, rec):
        """Appends rec, with the wall time, to the job's faults.jsonl."""
        with open(os.path.join(self.dir, "faults.jsonl"), "a") as f:
            f.write(json.dumps({**rec, "wall": time.time()}) + "\n")

    def flap_window_ok(self, t):
        """Nothing pending (a hung worker found during a flap would be counted against it) and
        every host in the same round for a while."""
        if self.link_up_at or self.restart_at or self.daemon_up_at is not None:
            return False
        self.stopped = {p for p in self.stopped if comm(p) and not zombie(p)}
        if self.stopped:
            return False
        since = self.steady_since()
        return since is not None and t - since > 1.0

    def beaten(self, pid):
        """Whether the worker has beaten in this attempt (its heartbeat file holds a step)."""
        try:
            with open(env_of(pid)[b"DDPRUN_HEARTBEAT_FILE"]) as f:
                return f.read().strip() != ""
        except (OSError, KeyError):
            return False

    # ------------------------------------------------------------------ the run
    def run(self, limit_s, gap_s):
        t0 = now()
        if self.variant == "daemon":
            self.start_daemon()
        if self.on_etcd():
            self.start_etcd()
        for h in HOSTS:
            self.start_agent(h)
        next_fault = t0 + self.rng.uniform(*gap_s)
        while True:
            t = now()
            if t - t0 > limit_s:
                self.problem("exit", f"the job did not end within {limit_s} s")
                break
            # Restore what the schedule took away.
            for h, at in list(self.link_up_at.items()):
                if t >= at:
                    self.c.net.link(h, True)
                    del self.link_up_at[h]
                    self.settle_until = max(self.settle_until, t + SETTLE_S)
            if self.daemon_up_at is not None and t >= self.daemon_up_at:
                self.daemon_up_at = None
                self.start_daemon()
                self.settle_until = max(self.settle_until, t + SETTLE_S)
            self.check_daemon(t, t0)
            for h, at in list(self.restart_at.items()):
                if t >= at:
                    del self.restart_at[h]
                    self.start_agent(h)
                    self.settle_until = max(self.settle_until, t + SETTLE_S)
            # Agents that ended by themselves end the job on their host.
            for h in HOSTS:
                p = self.agent.get(h)
                if p is not None and h not in self.final and h not in self.restart_at:
                    rc = p.poll()
                    if rc is not None:
                        self.final[h] = rc
            if len(self.final) == len(HOSTS):
                break
            self.sample()
            # The next fault: none once any host has finished (the job is ending), none inside a
            # flap's window. Flaps wait for a steady job (every host running the same round, no
            # fault pending) and go in bursts of up to 3 hosts at once (a switch's hiccup), so
            # that what they cost (nothing) is measured alone; the other kinds go meanwhile.
            if self.plan and not self.final and t >= next_fault and t >= self.quiet_until:
                done = False
                flaps = self.plan.count("link_flap")
                if flaps and self.flap_window_ok(t):
                    n = 0
                    for _ in range(min(3, flaps)):
                        if self.inject("link_flap") is None:
                            break
                        self.plan.remove("link_flap")
                        n += 1
                    done = n > 0
                others = [k for k in self.plan if k != "link_flap"]
                # A slow node waits for a steady job; another kind goes meanwhile.
                todo = others[:1]
                if todo == ["slow_node"]:
                    todo += [k for k in others if k != "slow_node"][:1]
                for kind in todo:
                    if done:
                        break
                    if self.inject(kind) is not None:
                        self.plan.remove(kind)
                        done = True
                next_fault = t + (self.rng.uniform(*gap_s) if done else 0.1)
            time.sleep(POLL)
        for h in list(self.link_up_at):
            self.c.net.link(h, True)
        self.link_up_at.clear()
        slow_node.stop(self)
        return now() - t0

    def check_daemon(self, t, t0):
        """A daemon that ended without being killed by the schedule is a fault of its own: say
        how it ended, when, and where its core went, and do not start it again."""
        if self.daemon is None or self.daemon_up_at is not None or self.daemon_ended:
            return
        rc = self.daemon.poll()
        if rc is None:
            return
        self.daemon_ended = (t, rc)
        self.log_fault({"kind": "daemon_ended", "t": t, "rc": rc})
        cores = [n for n in os.listdir(self.dir) if n.startswith("core")]
        self.problem("daemon", f"ddp-rendezvous (pid {self.daemon.pid}) ended by itself at "
                               f"+{t - t0:.1f} s ({exit_text(rc)})"
                     + (f"; core: {os.path.join(self.dir, cores[0])}" if cores else "; no core"))

    def sample(self):
        """At each new round: the daemon's memory and the open descriptors of every agent that
        runs its group."""
        self.events()
        if not self.starts or max(self.starts) <= self.rounds_seen:
            return
        r = max(self.starts)
        if self.starts[r] < len(HOSTS):
            return  # not every host has started it yet
        self.rounds_seen = r
        if self.variant == "daemon" and self.daemon and self.daemon.poll() is None:
            try:
                mem = self.daemon_stats()
            except subprocess.TimeoutExpired:
                mem = None
            self.daemon_samples.append((self.daemon.pid, r, mem, rss_kb(self.daemon.pid)))
        serving = self.store_host() if self.on_etcd() else None
        for h in HOSTS:
            p = self.agent.get(h)
            # Like with like: an agent between groups (its group just failed) holds neither the
            # workers' pipes nor the group's cgroup, and one elected to serve the store (etcd)
            # holds the other agents' connections to it.
            if p is not None and p.poll() is None and len(self.workers(h)) == NPROC:
                k = fd_kinds(p.pid)
                if k is not None:
                    self.fd_samples.setdefault((h, p.pid, h == serving), []).append(k)

    def stop(self):
        self.halt.set()
        for p in list(self.agent.values()) + [q for q in (self.daemon, self.etcd) if q]:
            if p.poll() is None:
                p.kill()
            p.wait()


class Campaign:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.ddprun = os.path.join(self.bin, "ddprun")
        self.rdzv = os.path.join(self.bin, "ddp-rendezvous")
        self.train = os.path.join(self.bin, "train")
        self.store_client = os.path.join(self.bin, "tests", "store_client")
        self.tmp = tempfile.mkdtemp(prefix="ddpchaos.")
        os.chmod(self.tmp, 0o755)
        self.wrapper = sick_node.write_wrapper(self.tmp)
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "wb") as f:
            f.write(os.urandom(32).hex().encode())
        os.chmod(self.token, 0o600)
        self.net = Net(self.tmp)
        # Event times are wall clock (ms); faults are monotonic: one offset, taken once.
        self.mono_minus_wall = time.monotonic() - time.time()

    def wall_to_mono(self, ts):
        t = time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")
        return calendar.timegm(t) + int(ts[20:23]) / 1000.0 + self.mono_minus_wall

    def clean_params(self):
        job = Job(self, "clean", "daemon", [], random.Random(0))
        took = job.run(self.args.job_limit, (1e9, 1e9))
        job.stop()
        if any(rc != 0 for rc in job.final.values()) or job.problems:
            raise RuntimeError(f"the clean run failed: {job.final} {job.problems}; see {job.dir}")
        with open(job.params, "rb") as f:
            return f.read(), took

    def plan(self, rng, variant):
        per = self.args.per_job
        kinds = [k for k in self.args.kinds for _ in range(per) if k not in ONLY_IN | SHARE]
        for k, (vs, share) in ONLY_IN.items():
            if variant in vs and k in self.args.kinds:
                kinds += [k] * round(per * share)
        for k, share in SHARE.items():
            if k in self.args.kinds:
                kinds += [k] * max(1, round(per * share))
        rng.shuffle(kinds)
        return kinds


def check_job(job, ref, results):
    """The invariants of one job; appends what is broken to job.problems and the figures to
    results."""
    ev = job.events()
    for h in HOSTS:
        rc = job.final.get(h)
        if rc != 0:
            job.problem("exit", f"host {h}: the agent's exit status is {rc}, not 0")
    try:
        with open(job.params, "rb") as f:
            got = f.read()
        if got != ref:
            job.problem("params", f"final parameters differ from the clean run ({len(got)} bytes "
                                f"against {len(ref)})")
    except OSError as e:
        job.problem("params", f"no final parameters: {e}")
    left = job.c.net.pids()
    left = [p for p in left if job.daemon is None or p != job.daemon.pid]
    if left:
        job.problem("leftover", f"processes left in the namespaces: "
                            f"{[(p, comm(p)) for p in left]}")
    pids = {e["pid"] for e in ev if e["event"] == "worker_started" and "pid" in e}
    shm = shm_entries(job.run_id, pids)
    if shm:
        job.problem("leftover", f"left in /dev/shm: {sorted(shm)}")
        for n in shm:  # not counted again against the next job
            path = os.path.join("/dev/shm", n)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    # Checkpoints: none torn (written whole, renamed into place), so none was ever skipped.
    for h in HOSTS:
        try:
            with open(os.path.join(job.dir, h + ".out"), errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        n = len(re.findall(r"skipped \d+ unusable checkpoint", text))
        if n:
            job.problem("checkpoint", f"host {h}: {n} unusable checkpoint(s) found")
    stray = [f for f in os.listdir(job.ckpt) if not re.fullmatch(r"ckpt-\d{20}\.bin", f)]
    results["stray_files"] += len(stray)
    # Growth: the daemon's accounting, per daemon lifetime, and each agent's descriptors.
    by_daemon = {}
    for pid, r, mem, rss in job.daemon_samples:
        by_daemon.setdefault(pid, []).append((r, mem, rss))
    for pid, s in by_daemon.items():
        mems = [m for _, m, _ in s if m is not None]
        if len(mems) >= 3 and mems[-1] > max(mems[:2]) * 1.5 + 65536:
            job.problem("growth", f"daemon {pid}: mem_used grew from {mems[:2]} to {mems[-1]} "
                                f"over {len(mems)} rounds")
        rss = [x for _, _, x in s if x is not None]
        if len(rss) >= 3 and rss[-1] > max(rss[:2]) + 4096:
            job.problem("growth", f"daemon {pid}: RSS grew from {rss[:2]} kB to {rss[-1]} kB")
        results["daemon_rounds"] += len(s)
        if mems:
            results["daemon_mem"].append((min(mems), max(mems)))
    for (h, pid, _), kinds in job.fd_samples.items():
        # A leak grows with the rounds; a connection on its way in or out (a node reconnecting,
        # a worker's store client) is there for a sample or two. The fewest of the last three
        # samples against the first, with room for two such connections.
        n = [sum(k.values()) for k in kinds]
        if len(n) >= 4 and min(n[-3:]) > n[0] + 2:
            grew = {k: v - kinds[0].get(k, 0) for k, v in kinds[-1].items()
                    if v > kinds[0].get(k, 0)}
            job.problem("growth", f"host {h} agent {pid}: open descriptors grew from {n[0]} to "
                        f"{n[-1]} over {len(n)} rounds ({grew})")
        results["fd_ranges"].append(max(n) - min(n))
    slow_node.check_stragglers(job, ev, HOSTS, SLACK, job_t0(job), results)
    slow_node.check_goodput(job, ev, HOSTS, results)
    # Quarantine: at the minimum every host stays, whatever it failed.
    stays = sick_node.check_quarantine(job, ev, HOSTS, MAX_NODE_FAILURES)
    # Each fault: detected within its bound, recovered when.
    g = job.group_rounds(ev)
    for f in job.injected:
        kind, t = f["kind"], f["t"]
        if kind == "sick_node":
            stats = results["kinds"].setdefault(kind, {"n": 0, "detected": 0, "bounded": 0,
                                                         "recover": [], "detect": [],
                                                         "starts": 0, "stays": 0})
            stats["n"] += 1
            sick_node.check_fault(job, f, ev, HOSTS, SICK_BOUND, stats)
            ip = job.c.net.addr[f["host"]]
            stats["stays"] += sum(1 for r in f["rounds"] if (r, ip) in stays)
            continue
        det = detect(job, f, ev)
        rec = None
        g_kind = {} if kind == "slow_node" else g  # a slow node restarts nothing
        before = max([r for h in HOSTS for (tt, r) in g[h] if tt <= t] or [-1])
        firsts = []
        for h in HOSTS:
            later = [tt for (tt, r) in g_kind.get(h, []) if tt > t and r > before]
            if later:
                firsts.append(later[0])
        if len(firsts) == len(HOSTS):
            rec = max(firsts) - t
        f["detect_s"], f["recover_s"] = det, rec
        stats = results["kinds"].setdefault(kind, {"n": 0, "detected": 0, "bounded": 0,
                                                     "recover": [], "detect": []})
        stats["n"] += 1
        if kind == "link_flap":
            w0, w1 = t, t + f["dur"] + KA_BOUND
            bad = [e for e in ev if w0 <= e["_t"] <= w1 and e["event"] in
                   ("rendezvous_round_ended", "rendezvous_store_lost", "worker_hung",
                    "worker_group_failed")]
            if bad:
                job.problem("flap", f"a {f['dur']:.2f} s flap of host {f['host']} cost a "
                                    f"restart: {bad[0]['event']} on {bad[0]['_host']}")
            else:
                stats["detected"] += 1
            continue
        bound = f.get("bound")
        # Alone: nothing else in effect when it came (isolated), and nothing else came before its
        # bound ran out (a worker killed on a node that is cut off stops that node's heartbeats
        # and its group: the cut is then found through another path, later).
        if bound is not None and any(o is not f and t < o["t"] <= t + bound for o in job.injected):
            f["isolated"] = False
        if det is None:
            if f.get("moot") or not f["isolated"]:
                # Nothing was running that could notice (see detect), or another fault hid it.
                stats["unseen"] = stats.get("unseen", 0) + 1
            else:
                job.problem("detect", f"{kind} of host {f['host']} at +{t - job_t0(job):.1f} s was "
                                    f"never detected")
            continue
        stats["detected"] += 1
        stats["detect"].append(det)
        if f["isolated"] and bound is not None:
            stats["bounded"] += 1
        if bound is not None and f["isolated"] and det > bound:
            job.problem("detect", f"{kind} of host {f['host']} detected after {det:.2f} s, "
                                f"bound {bound:.2f} s")
        if rec is not None:
            stats["recover"].append(rec)


def job_t0(job):
    return min([f["t"] for f in job.injected] or [now()])


def detect(job, f, ev):
    """Seconds from the fault to the first sign that ddprun noticed it, or None; sets f["bound"]
    and, when nothing could notice (no group, no round running), f["moot"]."""
    kind, t, h = f["kind"], f["t"], f["host"]
    after = [e for e in ev if e["_t"] >= t - 0.005]
    if kind == "worker_kill":
        # Not bounded when it was in uninterruptible sleep: it dies when the kernel lets it.
        f["bound"] = None if f.get("state") == "D" else 1.0 + SLACK
        for e in after:
            if e["event"] == "worker_exited" and e["_host"] == h and e.get("pid") == f["pid"]:
                return e["_t"] - t
        f["moot"] = True  # the worker was already on its way out (its group was stopping)
        return None
    if kind == "worker_stop":
        f["bound"] = (HB_TIMEOUT if f["beaten"] else HB_INITIAL) + SLACK + 1.0
        for e in after:
            if e["_host"] == h and ((e["event"] == "worker_hung" and e.get("pid") == f["pid"]) or
                                    (e["event"] == "worker_exited" and e.get("pid") == f["pid"])):
                return e["_t"] - t
        f["moot"] = True
        return None
    if kind == "agent_kill":
        f["bound"] = 1.0 + SLACK
        for e in after:
            if e["_host"] != h and e["event"] in ("rendezvous_round_ended", "rendezvous_store_lost"):
                return e["_t"] - t
            if e["_host"] == h and e["event"] == "rendezvous_joined":
                break  # back before anyone had to notice (it was not in a running round)
        f["moot"] = True
        return None
    if kind == "link_down":
        # Cut while a round ran: the keep-alive bound. Cut in a rendezvous or a restart: nobody
        # checks a joiner, so the node is missed once the others run a round, which can start
        # while it is still down.
        f["bound"] = KA_BOUND + KA_INTERVAL + SLACK + (0 if f["steady"] else f["dur"])
        for e in after:
            if e["_t"] > t + f["dur"] + KA_BOUND + 5:
                break
            if e["event"] in ("rendezvous_round_ended", "rendezvous_store_lost"):
                return e["_t"] - t
        f["moot"] = True  # down while nobody ran a round (a rendezvous): nothing to end
        return None
    if kind == "store_host_kill":
        # The others' connections to the store close with its process: they lose it at once.
        f["bound"] = 1.0 + SLACK
        for e in after:
            if e["_host"] != h and e["event"] in ("rendezvous_round_ended", "rendezvous_store_lost"):
                return e["_t"] - t
        f["moot"] = True
        return None
    if kind == "slow_node":
        return slow_node.detect(job, f, after, SLACK)
    if kind == "store_restart":
        f["bound"] = 1.0 + SLACK
        for e in after:
            if e["event"] == "rendezvous_store_lost":
                return e["_t"] - t
        f["moot"] = True
        return None
    return None


def summary_line(kind, s):
    if kind == "link_flap":
        return f"{kind:14s} injected {s['n']:4d}  cost no restart {s['detected']:4d}"
    if kind == "sick_node":
        det, rec = sorted(s["detect"]), sorted(s["recover"])
        return (f"{kind:14s} injected {s['n']:4d}  failed starts {s['starts']} (detected "
                f"{s['detected']}: {s['bounded']} alone: within bound; {s.get('unseen', 0)} "
                f"unseen), kept at the minimum {s['stays']}  detect median "
                f"{statistics.median(det) if det else 0:.2f} s max {max(det or [0]):.2f} s  "
                f"recover median {statistics.median(rec) if rec else 0:.2f} s max "
                f"{max(rec or [0]):.2f} s ({len(rec)} timed)")
    rec = sorted(s["recover"])
    det = sorted(s["detect"])
    med = f"{statistics.median(rec):.2f}" if rec else "-"
    mx = f"{max(rec):.2f}" if rec else "-"
    dmed = f"{statistics.median(det):.2f}" if det else "-"
    dmx = f"{max(det):.2f}" if det else "-"
    return (f"{kind:14s} injected {s['n']:4d}  detected {s['detected']:4d} "
            f"({s['bounded']} alone: within bound; {s.get('unseen', 0)} unseen: nothing ran that "
            f"could notice, or another fault hid it)  detect median {dmed} s max {dmx} s  "
            f"recover median {med} s max {mx} s ({len(rec)} timed)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BIN", "build"))
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("CHAOS_MINUTES", 2)))
    ap.add_argument("--seed", type=int, default=int(os.environ["CHAOS_SEED"])
                    if os.environ.get("CHAOS_SEED") else None)
    ap.add_argument("--per-job", type=int, default=5, help="faults of each kind in one job")
    ap.add_argument("--min-per-kind", type=int, default=20,
                    help="keep going past --minutes until every kind was injected this often")
    ap.add_argument("--job-limit", type=float, default=240, help="seconds one job may take")
    ap.add_argument("--gap", type=float, nargs=2, default=(0.2, 1.5),
                    help="seconds between two faults, drawn uniformly")
    ap.add_argument("--job", type=int, action="append",
                    help="run only this job of the seed's campaign (repeatable): replays one "
                         "job's schedule without the jobs before it")
    ap.add_argument("--kinds", type=lambda v: v.split(","), default=KINDS,
                    help="the kinds of fault to inject, comma-separated (default: every kind: "
                         + ",".join(KINDS) + ")")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", help="write the results there")
    args = ap.parse_args()
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown or not args.kinds:
        ap.error(f"--kinds: unknown kind {','.join(unknown)!r} (known: {','.join(KINDS)})")
    if os.geteuid() != 0:
        print("chaos: skipped: needs root (network namespaces)")
        return 77
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            print(f"chaos: skipped: {tool} is missing")
            return 77
    if shutil.which("etcd") is None:
        print("chaos: etcd is missing (scripts/ensure-deps.sh --test): no etcd variants, no "
              "store_host_kill", flush=True)
        for v in ETCD_VARIANTS:
            VARIANTS.remove(v)
        args.kinds = [k for k in args.kinds if k != "store_host_kill"]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"chaos: seed {seed} (replay: CHAOS_SEED={seed})", flush=True)
    rng = random.Random(seed)
    camp = Campaign(args)
    results = {"seed": seed, "jobs": 0, "kinds": {}, "stray_files": 0,
               "daemon_rounds": 0, "daemon_mem": [], "fd_ranges": [], "problems": []}
    stop = {"sig": None}

    def on_signal(sig, _):
        if stop["sig"] is None:  # a second one (timeout(1)'s) must not cut the teardown short
            stop["sig"] = sig
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    t0 = now()
    jobs = []
    try:
        try:
            camp.net.setup()
        except subprocess.CalledProcessError as e:
            print(f"chaos: skipped: network namespaces unavailable: "
                  f"{(e.stderr or b'').decode().strip()[-200:]}")
            return 77
        log(f"hosts {camp.net.p}a/b/c, store host {camp.net.p}s on {camp.net.sub}.0/24; "
            f"work directory {camp.tmp}")
        ref, clean_s = camp.clean_params()
        log(f"clean run: {clean_s:.1f} s, {len(ref)} bytes of parameters")
        i = 0
        while True:
            counts = {k: sum(1 for j in jobs for f in j.injected if f["kind"] == k)
                      for k in args.kinds}
            if not args.job and (now() - t0 >= args.minutes * 60
                                 and all(n >= min_count(k, args.min_per_kind)
                                         for k, n in counts.items())):
                break
            if not args.job and now() - t0 >= args.minutes * 60 * 2 + 120:
                results["problems"].append(["coverage", f"stopped at {now() - t0:.0f} s with "
                                            f"{counts}: not every kind reached --min-per-kind"])
                break
            variant = VARIANTS[i % len(VARIANTS)]
            plan, job_seed = camp.plan(rng, variant), rng.random()  # drawn for every job
            if args.job:
                if i > max(args.job):
                    break
                if i not in args.job:
                    i += 1
                    continue
            job = Job(camp, f"job{i}", variant, plan, random.Random(job_seed))
            took = job.run(args.job_limit, tuple(args.gap))
            job.stop()
            jobs.append(job)
            check_job(job, ref, results)
            kinds = ", ".join(f"{k} {sum(1 for f in job.injected if f['kind'] == k)}"
                              for k in KINDS)
            broken = "; ".join(t for _, t in job.problems)
            log(f"job{i} ({variant} store): {took:.1f} s, {len(job.injected)} faults ({kinds}); "
                f"{'ok' if not job.problems else 'BROKEN: ' + broken}")
            results["problems"] += [[inv, f"job{i}: {t}"] for inv, t in job.problems]
            i += 1
    except KeyboardInterrupt:
        results["problems"].append(["job", "interrupted"])
    finally:
        for j in jobs:
            j.stop()
        camp.net.teardown()
    results["jobs"] = len(jobs)
    sick = results["kinds"].get("sick_node")
    if sick and sick["starts"] >= 5 and not sick["stays"]:
        results["problems"].append(["quarantine", f"{sick['starts']} failed starts of sick "
                                    f"nodes, and the store never said one stays at the minimum"])
    results["seconds"] = round(now() - t0, 1)
    print(f"chaos: seed {seed}: {len(jobs)} jobs in {results['seconds']} s, "
          f"{results['stray_files']} unfinished checkpoint files left by killed writers")
    for k in KINDS:
        if k in results["kinds"]:
            print("chaos:   " + summary_line(k, results["kinds"][k]))
    if "slow_node" in args.kinds:
        print(f"chaos:   {slow_node.summary(results)}")
    if results["daemon_mem"]:
        lo = min(a for a, _ in results["daemon_mem"])
        hi = max(b for _, b in results["daemon_mem"])
        print(f"chaos:   daemon mem_used over {results['daemon_rounds']} rounds: {lo}..{hi} bytes; "
              f"agents' descriptors vary by at most {max(results['fd_ranges'] or [0])} per agent")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    if stop["sig"] is not None:
        return 128 + stop["sig"]
    if results["problems"]:
        for inv, t in results["problems"]:
            print(f"chaos: BROKEN ({inv}): {t}")
        print(f"chaos: work directory kept: {camp.tmp}")
        return 1
    if not args.keep:
        shutil.rmtree(camp.tmp, ignore_errors=True)
    print("chaos: every invariant held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
