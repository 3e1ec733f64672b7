# SPDX-License-Identifier: Apache-2.0
"""The sick node fault: a host whose workers fail at once for a while, as on a node whose GPU or
driver broke. Every host runs `train` through a small shell wrapper (the program of every agent):
while the host's marker file exists the wrapper exits 1 at once, before `train` runs, and counts
the start down (the marker holds how many are left; it is removed after the last, so the node
heals by itself). Each failed start appends its round (DDPRUN_ROUND) to the marker's log, which
tells the campaign which rounds the sick host failed. Nothing of it is in the product: ddprun
sees a program that exits 1."""
import os
import re

# $1: the host's marker; the rest: the program and its arguments. Every local rank that finds the
# marker exits 1; the first of a start to make the round's directory (mkdir is atomic) counts the
# start, so that one group start is one start whichever rank gets there first (a rank that finds
# the marker just removed runs `train`, and is stopped with its group).
WRAPPER = r'''# SPDX-License-Identifier: Apache-2.0
marker=$1
shift
if [ -e "$marker" ]; then
    # Another rank's exit stops the group (SIGTERM): the count is made all the same.
    trap '' TERM
    if mkdir "$marker.round-${DDPRUN_ROUND:?}" 2>/dev/null; then
        left=$(cat "$marker" 2>/dev/null || echo 1)
        if [ "${left:-1}" -le 1 ]; then
            rm -f "$marker"
        else
            echo $((left - 1)) >"$marker.new" && mv -f "$marker.new" "$marker"
        fi
        echo "$DDPRUN_ROUND" >>"$marker.log"
    fi
    echo "sick node: device unusable (round $DDPRUN_ROUND, local rank ${LOCAL_RANK:-?})" >&2
    exit 1
fi
exec "$@"
'''


def write_wrapper(tmp):
    """Writes the wrapper into the campaign's directory; returns its path."""
    path = os.path.join(tmp, "sick-wrapper.sh")
    with open(path, "w") as f:
        f.write(WRAPPER)
    os.chmod(path, 0o755)
    return path


def marker(job_dir, h):
    return os.path.join(job_dir, f"sick-{h}")


def make_sick(path, starts):
    """The host's next `starts` group starts fail; returns where its log stands now (the rounds
    logged after it are this fault's)."""
    with open(path + ".new", "w") as f:
        f.write(f"{starts}\n")
    os.replace(path + ".new", path)
    try:
        return os.path.getsize(path + ".log")
    except OSError:
        return 0


def sick_rounds(path, start, end=None):
    """The rounds whose start failed through the marker at path, from log offset start to end."""
    try:
        with open(path + ".log") as f:
            f.seek(start)
            text = f.read() if end is None else f.read(end - start)
    except OSError:
        return []
    return sorted({int(line.split()[0]) for line in text.splitlines() if line.split()})


def log_size(path):
    try:
        return os.path.getsize(path + ".log")
    except OSError:
        return 0


# The store's END_ROUND text, as the daemon logs it and the agents that ran the round repeat it.
ROUND_END = re.compile(r"rendezvous '[^']*' round (\d+) ended: (.*?)(?:; re-joining)?$")
ROOT_CAUSE = re.compile(r"^worker group failed on node \d+ \(([^)]*)\) round \d+")
STAYS = re.compile(r"host (\S+) has (\d+) failures \(max_node_failures=(\d+)\) but stays")
EXCLUDED = re.compile(r"host (\S+) excluded after (\d+) failures")


def round_end_texts(paths):
    """round -> why it ended, from every log given (the daemon's, the agents')."""
    out = {}
    for p in paths:
        try:
            with open(p, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            m = ROUND_END.search(line)
            if m:
                out.setdefault(int(m.group(1)), m.group(2))
    return out


# What can delay the news of a failed start: another host's agent or its link, or the store,
# away (the store's host killed takes its agent too); a hung worker elsewhere (its agent says
# nothing of the round's end while it captures the stacks). Other failures meanwhile end the
# round as soon or sooner.
SLOWING = ("agent_kill", "link_flap", "link_down", "store_restart", "store_host_kill",
           "worker_stop")


def first_event(ev, host, name, since, round_=None):
    for e in ev:
        if (e["_t"] >= since and e["_host"] == host and e["event"] == name
                and (round_ is None or e.get("round") == round_)):
            return e["_t"]
    return None


def round_end_seen(ev, host, round_, since):
    """When host learnt that round round_ ended: the round's end, its own group's failure (a
    second sick host, or a worker killed there meanwhile), or the store lost; before it started
    a group of a later round."""
    for e in ev:
        if e["_t"] < since - 0.005 or e["_host"] != host:
            continue
        if e["event"] == "worker_group_started" and e["round"] > round_:
            return None
        if ((e["event"] == "rendezvous_round_ended" and e.get("round") == round_)
                or e["event"] in ("worker_group_failed", "rendezvous_store_lost")):
            return e["_t"]
    return None


def check_fault(job, f, ev, hosts, bound, stats):
    """One sick_node fault: its failed starts (the rounds its wrapper logged), each detected (the
    sick host's group failed and every other host ended the round) within bound when nothing that
    could delay it was in effect; recovered when every host started a group of a later round than its last."""
    h = f["host"]
    path = marker(job.dir, h)
    later = [o["log_off"] for o in job.injected
             if o["kind"] == "sick_node" and o["host"] == h and o["t"] > f["t"]]
    rounds = sick_rounds(path, f["log_off"], min(later) if later else None)
    f["rounds"], f["detect_s"], f["recover_s"] = rounds, [], None
    stats["starts"] = stats.get("starts", 0) + len(rounds)
    if not rounds and os.path.exists(path) and not later:
        # The job ended before the host started a group again (its workers had finished).
        stats["unseen"] = stats.get("unseen", 0) + 1
        return
    if len(rounds) < f["starts"]:
        job.problem("detect", f"sick_node of host {h}: {len(rounds)} failed start(s) logged, "
                              f"{f['starts']} expected")
    for r in rounds:
        start = first_event(ev, h, "worker_group_started", f["t"], r)
        if start is None:
            continue  # its agent was killed before it said so
        seen = [first_event(ev, h, "worker_group_failed", start)]
        # Another host may have learnt that the round ended before this one even started its
        # group (a second sick host failed first): from its own start of the round, then.
        for o in hosts:
            if o != h:
                o_start = first_event(ev, o, "worker_group_started", f["t"], r)
                seen.append(round_end_seen(ev, o, r, min(start, o_start or start)))
        alone = job.calm.get((h, r), False) and not any(
            o["kind"] in SLOWING and start - 0.5 < o["t"] <= start + bound for o in job.injected)
        if None in seen:
            if alone:
                job.problem("detect", f"sick_node of host {h}: the failed start of round {r} "
                                      f"was not seen everywhere ({seen})")
            else:
                stats["unseen"] = stats.get("unseen", 0) + 1
            continue
        det = max(0.0, max(seen) - start)
        f["detect_s"].append(det)
        stats["detected"] += 1
        stats["detect"].append(det)
        if alone:
            stats["bounded"] += 1
            if det > bound:
                job.problem("detect", f"sick_node of host {h}: the failed start of round {r} "
                                      f"ended everywhere after {det:.2f} s, bound {bound:.2f} s")
    if rounds:
        firsts = [first_event([e for e in ev if e.get("round", -1) > rounds[-1]], o,
                              "worker_group_started", f["t"]) for o in hosts]
        if None not in firsts:
            f["recover_s"] = max(firsts) - f["t"]
            stats["recover"].append(f["recover_s"])


def check_quarantine(job, ev, hosts, max_failures):
    """The store counts each host's root-cause failures; with every node needed (min = max) a host
    that reaches max_failures must be kept: no round's end says a host is excluded, no agent
    reports it, and from the max_failures-th failure of a host on one store on, the round's end
    says it stays. Returns {(round, host address)} of the rounds whose end said so."""
    logs = [os.path.join(job.dir, h + ".out") for h in hosts]
    if job.variant == "daemon":
        logs.insert(0, os.path.join(job.dir, "daemon.out"))
    texts = round_end_texts(logs)
    for e in ev:
        if e["event"] == "node_excluded":
            job.problem("quarantine", f"host {e['_host']} was excluded: {e.get('reason')}")
    # A restarted daemon starts its counts afresh, and so does the store another agent serves
    # after the serving host died (etcd): a round belongs to the store that ran it.
    started = {}
    for e in ev:
        if e["event"] == "worker_group_started":
            started.setdefault(e["round"], e["_t"])
    restarts = sorted(o["t"] for o in job.injected
                      if o["kind"] in ("store_restart", "store_host_kill"))
    counts, stays = {}, set()
    for r in sorted(texts):
        text = texts[r]
        m = EXCLUDED.search(text)
        if m:
            job.problem("quarantine", f"round {r}: host {m.group(1)} excluded at the minimum: "
                                      f"{text[:200]}")
        cause = ROOT_CAUSE.match(text)
        s = STAYS.search(text)
        if s:
            stays.add((r, s.group(1)))
        if cause is None or r not in started:
            continue  # not ended by a failure, or not known when it ran: not counted here
        store = sum(1 for t in restarts if t < started[r])
        key = (store, cause.group(1))
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= max_failures and (s is None or s.group(1) != cause.group(1)):
            job.problem("quarantine", f"round {r}: at least {counts[key]} failures of host "
                                      f"{cause.group(1)} (max_node_failures={max_failures}) and "
                                      f"the round's end does not say it stays: {text[:200]}")
    return stays
