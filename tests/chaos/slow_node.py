# SPDX-License-Identifier: Apache-2.0
"""The slow node fault: one host's workers made slow for a while, then back to normal, as on a
node whose GPU throttles or whose CPU another job takes. `train`'s --step-delay-ms is fixed for a
run, so the campaign slows the processes from outside: every worker of the host is SIGSTOPped for
DUTY of each period (drawn from PERIOD_S) and SIGCONTed for the rest, for the fault's duration
(the workers of a group that starts meanwhile too; a worker another fault stopped is left alone).
The store's straggler detection (--straggler_*) must name that host within BOUND, and name no
other host, ever. Each agent's last incarnation must report its goodput (the shutdown event's
goodput object, and the summary's goodput line when its job restarted)."""
import os
import random
import re
import signal
import statistics
import threading
import time

# Straggler detection. Rank 0's evaluation counts as its compute, so the campaign's `train` runs
# with --eval-samples 0. A fault lasts past WINDOWS + 1 windows, so that two whole slow windows
# lie inside it wherever the store's windows begin; the bound: those windows, one more for the
# verdict to reach the agents' event logs, and the campaign's slack (added by BOUND's user).
THRESHOLD = 1.3
WINDOW = 1.0
WINDOWS = 2
DUTY = 0.75
PERIOD_S = (0.1, 0.3)
SLOW_S = (3.5, 5.0)


def flags():
    return [f"--straggler_threshold={THRESHOLD}", f"--straggler_window={WINDOW}",
            f"--straggler_windows={WINDOWS}"]


def bound(slack):
    return (WINDOWS + 2) * WINDOW + slack


def now():
    return time.monotonic()


def named_now(job):
    """Whether a rank is named a straggler now: its last straggler event is not followed by its
    straggler_cleared, nor by a group start (a new round judges afresh)."""
    last, started = {}, 0.0
    for e in job.events():
        if e["event"] in ("straggler", "straggler_cleared"):
            last[(e.get("host"), e.get("rank"))] = (e["_t"], e["event"])
        elif e["event"] == "worker_group_started":
            started = e["_t"]
    return any(name == "straggler" and t > started for t, name in last.values())


def inject(job, rec, hosts, slack):
    """Slows a host of job from now on, in a thread; fills rec; False when a rank is still named
    (a host slowed again before it cleared would not be named anew). Nothing else is injected
    while it lasts and until its bound ran out (job.quiet_until): the verdict is its alone."""
    if named_now(job):
        return False
    t = rec["t"]
    h = job.rng.choice(hosts)
    dur = job.rng.uniform(*SLOW_S)
    rec.update(host=h, dur=dur, isolated=True)
    job.quiet_until = max(job.quiet_until, t + max(dur, bound(slack)) + 0.2)
    th = threading.Thread(target=cycle, args=(job, h, t + dur, random.Random(job.rng.random())),
                          daemon=True)
    th.start()
    job.slow_threads.append(th)
    return True


def cycle(job, h, end, rng):
    touched = set()
    while now() < end and not job.halt.is_set():
        period = rng.uniform(*PERIOD_S)
        pids = [p for p in job.workers(h) if p not in job.stopped]
        for p in pids:
            try:
                os.kill(p, signal.SIGSTOP)
                touched.add(p)
            except ProcessLookupError:
                pass
        time.sleep(period * DUTY)
        for p in pids:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        time.sleep(period * (1 - DUTY))
    for p in touched - job.stopped:
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


def detect(job, f, after, slack):
    """Seconds from the fault to the first straggler event (any node's) naming the host's
    address, or None; sets f["bound"], and f["moot"] when the job ended too soon."""
    t, ip, f["bound"] = f["t"], job.c.net.addr[f["host"]], bound(slack)
    for e in after:
        if e["_t"] > t + f["dur"] + f["bound"] + 10:  # later: a named host is a false positive
            break
        if e["event"] == "straggler" and e.get("host") == ip:
            return e["_t"] - t
        if e["event"] == "shutdown" and e["_t"] < t + f["bound"]:
            f["moot"] = True  # the job ended before two whole windows were slow
            return None
    return None


def check_stragglers(job, ev, hosts, slack, t0, results):
    """No host is named a straggler outside a slow_node fault on it (from the fault's start to
    its end plus the bound); each false positive is counted once (every node writes the event)."""
    by_ip = {job.c.net.addr[h]: h for h in hosts}
    last = {}
    for e in ev:
        if e["event"] != "straggler":
            continue
        h = by_ip.get(e.get("host"))
        if h is not None and any(
                f["kind"] == "slow_node" and f["host"] == h and
                f["t"] - 0.005 <= e["_t"] <= f["t"] + f["dur"] + bound(slack)
                for f in job.injected):
            continue
        key = (e.get("host"), e.get("rank"))
        if key in last and e["_t"] - last[key] <= 2 * WINDOW:
            continue
        last[key] = e["_t"]
        results["false_stragglers"] = results.get("false_stragglers", 0) + 1
        job.problem("straggler", f"host {h or e.get('host')} (rank {e.get('rank')}) named a "
                                 f"straggler at +{e['_t'] - t0:.1f} s on {e['_host']} with no "
                                 f"slow_node fault on it (ratio {e.get('ratio')})")


def check_goodput(job, ev, hosts, results):
    """Every host's last agent reports its goodput: the shutdown event's goodput object, and the
    summary's goodput line when it restarted (ddprun prints it at -v otherwise)."""
    for h in hosts:
        downs = [e for e in ev if e["_host"] == h and e["event"] == "shutdown"]
        gp = downs[-1].get("goodput") if downs else None
        if not isinstance(gp, dict) or not gp.get("wall_ms") or "ratio" not in gp:
            job.problem("goodput", f"host {h}: the last shutdown event has no goodput object "
                                   f"({gp!r})")
            continue
        try:
            with open(os.path.join(job.dir, h + ".out"), errors="replace") as f:
                text = f.read().rsplit("--- agent started", 1)[-1]
        except OSError:
            text = ""
        # The line: at the default level when the job restarted (else at -v).
        if gp.get("restarts") and not re.search(r"goodput (\d+\.\d+%|unknown)", text):
            job.problem("goodput", f"host {h}: the agent restarted {gp['restarts']} times and "
                                   f"its summary has no goodput line")
            continue
        if gp.get("ratio") is not None:
            results.setdefault("goodput", []).append(gp["ratio"])


def summary(results):
    gps = sorted(results.get("goodput", []))
    gp = f"median {statistics.median(gps):.3f} min {gps[0]:.3f}" if gps else "none"
    return (f"stragglers named outside a slow_node fault: {results.get('false_stragglers', 0)}; "
            f"goodput of the agents' last incarnations ({len(gps)}): {gp}")


def state():
    """A job's duty cycling threads, and the event that ends them."""
    return [], threading.Event()


def stop(job):
    job.halt.set()
    for th in job.slow_threads:
        th.join(5)
