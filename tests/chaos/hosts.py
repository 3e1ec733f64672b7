# SPDX-License-Identifier: Apache-2.0
"""The campaign's hosts and what it reads of their processes: network namespaces joined by a
bridge (Net), and /proc and /dev/shm as the invariants see them."""
import ctypes
import os
import random
import re
import resource
import signal
import subprocess
import time


def shm_entries(run_id, worker_pids):
    """What the agents of run run_id and their workers left in /dev/shm: the agents' scratch
    directories (ddprun-shm-<run id>-XXXXXX) and private run directories (ddprun-<run id>-XXXXXX),
    and the CPU backend's segments named by a worker without a scratch directory
    (ddpw-<pid>-<hex>) of the pids given. Any other ddprun job on the machine has names of its
    own run id and workers, and is none of the campaign's business."""
    prefixes = (f"ddprun-shm-{run_id}-", f"ddprun-{run_id}-")
    found = set()
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return found
    for n in names:
        m = re.fullmatch(r"ddpw-(\d+)-[0-9a-f]+", n)
        if n.startswith(prefixes) or (m and int(m.group(1)) in worker_pids):
            found.add(n)
    return found



class Net:
    """Hosts a, b, c (agents) and s (the daemon), each a network namespace with a veth to a bridge
    in a fifth one; its own hostname, /etc/hosts and a loopback-only resolver (a mount namespace
    per command), as tests/integration/test_netns.sh does."""

    def __init__(self, tmp):
        self.tmp = tmp
        base = f"dch{os.getpid()}"
        self.p = base
        while os.path.exists(f"/run/netns/{self.p}a") or os.path.exists(f"/run/netns/{self.p}br"):
            self.p = f"{base}r{random.randrange(1 << 16)}"
        self.sub = f"10.215.{random.SystemRandom().randrange(20, 220)}"
        self.addr = {"a": self.sub + ".11", "b": self.sub + ".12", "c": self.sub + ".13",
                     "s": self.sub + ".14"}
        self.names = [self.p + "br"] + [self.p + h for h in self.addr]
        self.netns_dir_existed = os.path.isdir("/run/netns")
        self.made = False

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def setup(self):
        self.made = True
        br = self.p + "br"
        self.ip("netns", "add", br)
        self.ip("-n", br, "link", "set", "lo", "up")
        self.ip("-n", br, "link", "add", "br0", "type", "bridge")
        self.ip("-n", br, "link", "set", "br0", "up")
        for h, a in self.addr.items():
            ns = self.p + h
            self.ip("netns", "add", ns)
            subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "sysctl", "-qw",
                            "net.ipv6.conf.all.disable_ipv6=1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            self.ip("-n", ns, "link", "set", "lo", "up")
            self.ip("-n", br, "link", "add", "v" + h, "type", "veth", "peer", "name", "eth0",
                    "netns", ns)
            self.ip("-n", br, "link", "set", "v" + h, "master", "br0", "up")
            self.ip("-n", ns, "addr", "add", a + "/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")
        with open(os.path.join(self.tmp, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n")
            for h, a in self.addr.items():
                f.write(f"{a} {self.p}{h}\n")
        with open(os.path.join(self.tmp, "resolv.conf"), "w") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def cmd(self, h, argv):
        """argv run on host h (nsenter, unshare and sh exec: the PID is argv's own)."""
        return ["nsenter", f"--net=/run/netns/{self.p}{h}", "unshare", "--uts", "--mount",
                "--propagation", "private", "/bin/sh", "-c",
                'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && '
                'hostname "$3" && shift 3 && exec "$@"', "in_ns",
                os.path.join(self.tmp, "hosts"), os.path.join(self.tmp, "resolv.conf"),
                self.p + h] + argv

    def link(self, h, up):
        self.ip("-n", self.p + "br", "link", "set", "v" + h, "up" if up else "down")

    def pids(self, h=None):
        out = []
        for ns in ([self.p + h] if h else self.names):
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            out += [int(x) for x in r.stdout.split()]
        return out

    def teardown(self):
        if not self.made:
            return
        for _ in range(3):
            for p in self.pids():
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for ns in self.names:
            if os.path.exists(f"/run/netns/{ns}"):
                subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        if not self.netns_dir_existed and os.path.isdir("/run/netns") and not os.listdir("/run/netns"):
            subprocess.run(["umount", "/run/netns"], stderr=subprocess.DEVNULL)
            try:
                os.rmdir("/run/netns")
            except OSError:
                pass


def children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_state(pid):
    """The one-letter state of pid (R, S, D, T, Z), or "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def zombie(pid):
    return proc_state(pid) in ("Z", "")


def fd_kinds(pid):
    """What pid holds open, by kind ("socket", "pipe", "anon_inode:[eventfd]", or the path)."""
    out = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            # Sockets and pipes by kind; a worker group's cgroup (.../g<attempt>) as one name.
            k = t.split(":[")[0] if t.startswith(("socket:", "pipe:")) else re.sub(
                r"/g\d+(/|$)", r"/g*\1", t)
            out[k] = out.get(k, 0) + 1
    except OSError:
        return None
    return out


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


_libc = ctypes.CDLL(None, use_errno=True)


def die_with_campaign():
    """preexec_fn of what the campaign starts: SIGKILLed when the campaign dies, even by
    SIGKILL, so that no agent or daemon outlives it (PR_SET_PDEATHSIG survives the execs of
    nsenter, unshare and sh)."""
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def with_core_dumps():
    """preexec_fn of the daemon: dies with the campaign, and leaves a core file if it crashes
    (kernel.core_pattern permitting: "core" writes it into the job's directory, its cwd)."""
    die_with_campaign()
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def env_of(pid):
    """pid's environment as bytes -> bytes ({} once it is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def exit_text(rc):
    """A Popen returncode in words."""
    if rc is None:
        return "running"
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}"
    return f"exit status {rc}"
