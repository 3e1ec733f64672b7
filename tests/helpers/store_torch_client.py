#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch 2.x's own TCPStore *client* against a ddp-rendezvous --no-auth server.

    store_torch_client.py PORT

Connects to 127.0.0.1:PORT with `torch.distributed.TCPStore(..., is_master=False)` and drives
every public name TCPStore has (methods and properties alike), each with at least one real
assertion: the value returned, that a call blocks until another client acts, that it times out
after the timeout it was given and the connection stays usable. The whole set runs twice: with
use_libuv=True clients and with use_libuv=False ("legacy") clients, which speak the same wire
protocol except that their queue methods raise NotImplementedError before sending anything.

It fails when a public name of TCPStore (taken from dir() at run time, so a newer PyTorch with
new methods fails until they are tested here) has no passing check in a pass. Prints exactly
"torch client ok" on stdout and exits 0 when everything holds; otherwise exits 1 with one line
per failure on stderr, naming the method, what was checked and what happened.

The expectations are PyTorch's own: this script passes against PyTorch 2.15's libuv TCPStore
server (`TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)`).
PyTorch's legacy (non-libuv) server has no queues and drops the connection on them, so against
it only the queue checks fail.

Run it under scripts/private-names.sh: the client looks names up. Every blocking call is bounded
by a store timeout of at most 2 s; the whole run takes about 10 s.
"""
import contextlib
import datetime
import gc
import os
import sys
import threading
import time
import warnings

# Before torch is imported: c10d logs a warning line for every expected timeout (and torch warns
# when NumPy is absent); silenced so that stderr holds only this script's verdict.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch.distributed as dist  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402

HOST = "127.0.0.1"
BASE_TIMEOUT = datetime.timedelta(seconds=2)  # every client's timeout unless a check shortens it
SHORT = datetime.timedelta(milliseconds=300)  # the timeout of the calls that must time out
DELAY = 0.3  # seconds before another client releases a blocked call
MIN_BLOCK = 0.25  # a call that must block ~0.3 s took at least this long
# A call that must not block returned within this. Generous, for loaded machines: each such call
# would otherwise block for a whole timeout (300 ms raising, or BASE_TIMEOUT) and raise.
AT_ONCE = 1.0
MAX_TIMEOUT = 3.0  # a 300 ms timeout fired within this
JOIN_LIMIT = 5.0  # a background call is given up on after this
LEGACY_QUEUE_MSG = "queues not implemented on legacy TCPStore backend"

DistStoreError = dist.DistStoreError
# QueueEmptyError subclasses DistStoreError; older 2.x releases without queues lack it.
QueueEmptyError = getattr(dist, "QueueEmptyError", None)
PUBLIC = {m for m in dir(TCPStore) if not m.startswith("_")}


class Fail(Exception):
    """A check that did not hold; its text is the line reported."""


def expect(cond, what):
    if not cond:
        raise Fail(what)


def describe(err):
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


def timed(fn, *args):
    """(fn's result, seconds it took); exceptions pass through."""
    t0 = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - t0


def attempt(fn, *args):
    """(the exception fn raised or None, seconds it took)."""
    t0 = time.monotonic()
    try:
        fn(*args)
    except Exception as err:  # noqa: BLE001 - the caller checks what it was
        return err, time.monotonic() - t0
    return None, time.monotonic() - t0


def expect_error(err, seconds, kind, text, lo=0.0, hi=AT_ONCE, not_kind=None):
    """err is a `kind` (and not a `not_kind`) whose message holds `text`, raised in [lo, hi) s."""
    expect(err is not None, f"returned after {seconds:.3f} s instead of raising {kind.__name__}")
    expect(isinstance(err, kind) and not (not_kind and isinstance(err, not_kind)),
           f"raised {describe(err)} instead of {kind.__name__}")
    expect(text in str(err), f"raised {describe(err)}, expected a message with {text!r}")
    expect(lo <= seconds < hi, f"raised after {seconds:.3f} s, expected in [{lo}, {hi}) s")


class Later(threading.Thread):
    """fn(*args) on a thread of its own after `delay` s, keeping its result or exception and how
    long the call took. Blocking TCPStore calls release the GIL, so plain threads suffice."""

    def __init__(self, delay, fn, *args):
        super().__init__(daemon=True)
        self.delay, self.fn, self.args = delay, fn, args
        self.result = self.error = self.seconds = None
        self.start()

    def run(self):
        time.sleep(self.delay)
        t0 = time.monotonic()
        try:
            self.result = self.fn(*self.args)
        except Exception as err:  # noqa: BLE001 - kept for the check to judge
            self.error = err
        self.seconds = time.monotonic() - t0

    def finish(self):
        self.join(JOIN_LIMIT)
        expect(not self.is_alive(), f"a background call was still running after {JOIN_LIMIT} s")
        return self

    def expect_ok(self, who):
        self.finish()
        expect(self.error is None, f"{who} raised {describe(self.error)}" if self.error else "")
        return self.result


class Pass:
    """One run of the whole set with clients of one kind (use_libuv True or False)."""

    def __init__(self, port, use_libuv):
        self.port, self.use_libuv = port, use_libuv
        # Keys of this pass and run only: the other pass (and a rerun on the same server) sees
        # every key through list_keys/num_keys, so checks look at their own prefix or at deltas.
        self.prefix = f"tc{os.getpid()}/{'L' if use_libuv else 'N'}/"
        self.tested = set()
        self.failures = []

    def client(self, timeout=BASE_TIMEOUT, use_libuv=None):
        kind = self.use_libuv if use_libuv is None else use_libuv
        return TCPStore(HOST, self.port, is_master=False, use_libuv=kind, timeout=timeout)

    def keys(self, group):
        """A key maker for one group of checks: k("a") -> "tc123/L/group/a"."""
        return lambda name: f"{self.prefix}{group}/{name}"

    @contextlib.contextmanager
    def check(self, method, what):
        """One assertion about `method`. Whatever goes wrong inside becomes a Fail naming the
        method and the check; only a check that holds counts `method` as covered."""
        try:
            yield
        except Fail as err:
            raise Fail(f"{method} ({what}): {err}") from None
        except Exception as err:  # noqa: BLE001 - e.g. the server closed the connection
            raise Fail(f"{method} ({what}): {describe(err)}") from None
        self.tested.add(method)

    def run(self, group):
        """Runs one group of checks; its first failure ends that group and is recorded. Each group
        has clients of its own, so one whose connection was dropped does not sink the others; they
        close when it returns. A group holds at most 3 connections at once."""
        try:
            group(self)
        except Fail as err:
            self.failures.append(str(err))
        except Exception as err:  # noqa: BLE001 - outside any check: setup or connect
            self.failures.append(f"{group.__name__}: {describe(err)}")
        # The group's clients are its locals, but a caught exception's traceback makes a cycle
        # through the frames that hold them, which reference counting alone never frees. Collect
        # now, so that their connections close before the next group opens its own: the daemon
        # of the integration test allows only 4 connections.
        gc.collect()


# --- the checks, one group per function ----------------------------------------------------------


def check_attributes(p):
    s = p.client()
    with p.check("host", "is the host given"):
        expect(s.host == HOST, f"{s.host!r} != {HOST!r}")
    with p.check("port", "is the port given"):
        expect(s.port == p.port, f"{s.port!r} != {p.port}")
    with p.check("timeout", "is the timeout given"):
        expect(s.timeout == BASE_TIMEOUT, f"{s.timeout!r} != {BASE_TIMEOUT!r}")
    with p.check("libuvBackend", "is the use_libuv given"):
        expect(s.libuvBackend is p.use_libuv, f"{s.libuvBackend!r}, use_libuv={p.use_libuv}")
    with p.check("has_extended_api", "is True"):
        expect(s.has_extended_api() is True, f"{s.has_extended_api()!r}")
    with p.check("set_timeout", "changes .timeout and back"):
        s.set_timeout(SHORT)
        expect(s.timeout == SHORT, f".timeout {s.timeout!r} after set_timeout({SHORT!r})")
        s.set_timeout(BASE_TIMEOUT)
        expect(s.timeout == BASE_TIMEOUT, f".timeout {s.timeout!r} after restoring it")
    # That set_timeout also governs how long get/wait/queue_pop/barrier block is checked below.


def check_key_value(p):
    s, k = p.client(), p.keys("kv")
    with p.check("set", "get returns the value; overwrite with binary bytes"):
        s.set(k("a"), "hello")
        expect(s.get(k("a")) == b"hello", f"get after set: {s.get(k('a'))!r}")
        s.set(k("a"), b"\x00\xff\r\n bin")
        got = s.get(k("a"))
        expect(got == b"\x00\xff\r\n bin", f"get after overwrite with bytes: {got!r}")
    with p.check("get", "returns the stored bytes at once"):
        s.set(k("g"), "value")
        got, seconds = timed(s.get, k("g"))
        expect(got == b"value" and seconds < AT_ONCE, f"{got!r} after {seconds:.3f} s")
    with p.check("add", "creates, increments, goes negative, stores decimal text"):
        got = [s.add(k("n"), 3), s.add(k("n"), 4), s.add(k("n"), -10)]
        expect(got == [3, 7, -3], f"add 3, 4, -10 returned {got}")
        expect(s.get(k("n")) == b"-3", f"get of the counter: {s.get(k('n'))!r}")
    with p.check("append", "creates the key, then appends"):
        s.append(k("log"), "ab")
        s.append(k("log"), b"cd")
        expect(s.get(k("log")) == b"abcd", f"{s.get(k('log'))!r}")
    with p.check("check", "True when all keys exist, False when one is missing"):
        expect(s.check([k("a"), k("n")]) is True, "check of two existing keys is not True")
        expect(s.check([k("a"), k("absent")]) is False, "check with a missing key is not False")
    with p.check("compare_set", "match, mismatch, absent with expected, absent with empty"):
        s.set(k("cs"), "old")
        got = s.compare_set(k("cs"), "old", "new")
        expect(got == b"new" and s.get(k("cs")) == b"new", f"on a match returned {got!r}")
        got = s.compare_set(k("cs"), "wrong", "x")
        expect(got == b"new" and s.get(k("cs")) == b"new", f"on a mismatch returned {got!r}")
        got = s.compare_set(k("cs_absent"), "exp", "v")
        expect(got == b"exp", f"on an absent key with expected 'exp' returned {got!r}")
        expect(not s.check([k("cs_absent")]), "an absent key with non-empty expected was created")
        got = s.compare_set(k("cs_empty"), "", "v")
        expect(got == b"v" and s.get(k("cs_empty")) == b"v",
               f"on an absent key with empty expected returned {got!r}")
    with p.check("multi_set", "sets every pair"):
        s.multi_set([k("m1"), k("m2")], ["x", b"y\x00"])
        got = [s.get(k("m1")), s.get(k("m2"))]
        expect(got == [b"x", b"y\x00"], f"get after multi_set: {got}")
    with p.check("multi_get", "returns the values in the order asked"):
        got = s.multi_get([k("m2"), k("a"), k("m1")])
        expect(got == [b"y\x00", b"\x00\xff\r\n bin", b"x"], f"{got}")
    with p.check("delete_key", "True, then False; the key is gone"):
        s.set(k("d"), "1")
        expect(s.delete_key(k("d")) is True, "deleting an existing key did not return True")
        expect(s.delete_key(k("d")) is False, "deleting it again did not return False")
        expect(s.check([k("d")]) is False, "check still sees the deleted key")
    with p.check("num_keys", "+2 for two new keys, +0 for an overwrite, -1 for a delete"):
        # Relative: the store holds other keys (the other pass's; some versions add "init/").
        n0 = s.num_keys()
        s.set(k("nk1"), "1")
        s.set(k("nk2"), "2")
        n2 = s.num_keys()
        s.set(k("nk1"), "again")
        n2b = s.num_keys()
        s.delete_key(k("nk1"))
        n1 = s.num_keys()
        expect((n2 - n0, n2b - n0, n1 - n0) == (2, 2, 1),
               f"from {n0}: {n2} after two sets, {n2b} after an overwrite, {n1} after a delete")


def check_blocking(p):
    s, other, k = p.client(), p.client(), p.keys("blk")
    s.set(k("here"), "v")
    with p.check("get", "a missing key blocks for the store timeout, then raises"):
        s.set_timeout(SHORT)
        err, seconds = attempt(s.get, k("missing"))
        s.set_timeout(BASE_TIMEOUT)
        expect_error(err, seconds, DistStoreError, "timeout", MIN_BLOCK, MAX_TIMEOUT)
    with p.check("get", "the connection is usable after a timeout"):
        expect(s.get(k("here")) == b"v", f"{s.get(k('here'))!r}")
    with p.check("get", "released when another client sets the key"):
        bg = Later(DELAY, other.set, k("late_get"), "L")
        got, seconds = timed(s.get, k("late_get"))
        bg.expect_ok("the other client's set")
        expect(got == b"L" and seconds >= MIN_BLOCK, f"{got!r} after {seconds:.3f} s")
    with p.check("wait", "wait(keys, timeout): times out on a missing key"):
        err, seconds = attempt(s.wait, [k("here"), k("missing")], SHORT)
        expect_error(err, seconds, DistStoreError, "timeout", MIN_BLOCK, MAX_TIMEOUT)
        expect(s.get(k("here")) == b"v", "the connection is not usable after the timeout")
    with p.check("wait", "wait(keys): times out after the store timeout"):
        s.set_timeout(SHORT)
        err, seconds = attempt(s.wait, [k("missing")])
        s.set_timeout(BASE_TIMEOUT)
        expect_error(err, seconds, DistStoreError, "timeout", MIN_BLOCK, MAX_TIMEOUT)
    with p.check("wait", "returns at once when the keys exist"):
        _, seconds = timed(s.wait, [k("here"), k("late_get")], SHORT)
        expect(seconds < AT_ONCE, f"took {seconds:.3f} s")
    with p.check("wait", "released when another client sets the key"):
        bg = Later(DELAY, other.set, k("late_wait"), "W")
        _, seconds = timed(s.wait, [k("here"), k("late_wait")], BASE_TIMEOUT)
        bg.expect_ok("the other client's set")
        expect(seconds >= MIN_BLOCK, f"returned after {seconds:.3f} s, before the key was set")
    with p.check("multi_get", "blocks on a missing key, then times out"):
        s.set_timeout(SHORT)
        err, seconds = attempt(s.multi_get, [k("here"), k("missing")])
        s.set_timeout(BASE_TIMEOUT)
        expect_error(err, seconds, DistStoreError, "timeout", MIN_BLOCK, MAX_TIMEOUT)


def check_clone(p):
    s, k = p.client(), p.keys("clone")
    c = s.clone()
    with p.check("clone", "a TCPStore on the same server"):
        expect(isinstance(c, TCPStore), f"returned {type(c).__name__}")
        got = (c.host, c.port, c.libuvBackend)
        expect(got == (s.host, s.port, s.libuvBackend), f"host, port, libuvBackend: {got}")
    with p.check("clone", "sees the original's keys and the original sees its keys"):
        s.set(k("from_orig"), "1")
        c.set(k("from_clone"), "2")
        got = (c.get(k("from_orig")), s.get(k("from_clone")))
        expect(got == (b"1", b"2"), f"{got}")
    with p.check("clone", "a connection of its own: blocks in a thread while the original sets"):
        bg = Later(0, c.get, k("late"))
        time.sleep(DELAY)
        s.set(k("late"), "x")
        got = bg.expect_ok("the clone's get")
        expect(got == b"x" and bg.seconds >= MIN_BLOCK, f"{got!r} after {bg.seconds:.3f} s")


def check_queues(p):
    """use_libuv=True: the queue commands on the server."""
    s, other, k = p.client(), p.client(), p.keys("q")
    with p.check("queue_push", "str and bytes items; queue_len counts them"):
        s.queue_push(k("q"), "a")
        s.queue_push(k("q"), b"b\x00c")
        expect(s.queue_len(k("q")) == 2, f"queue_len {s.queue_len(k('q'))} after two pushes")
    with p.check("queue_len", "0 for an unknown queue"):
        expect(s.queue_len(k("unknown")) == 0, f"{s.queue_len(k('unknown'))}")
    with p.check("queue_pop", "block=False pops the oldest item first"):
        got = [s.queue_pop(k("q"), False), s.queue_pop(k("q"), block=False)]
        expect(got == [b"a", b"b\x00c"], f"{got}")
        expect(s.queue_len(k("q")) == 0, f"queue_len {s.queue_len(k('q'))} after popping both")
    with p.check("queue_pop", "block=False on an empty or unknown queue raises QueueEmptyError"):
        for key in (k("q"), k("unknown")):
            err, seconds = attempt(s.queue_pop, key, False)
            expect_error(err, seconds, QueueEmptyError, "queue is empty")
    with p.check("queue_pop", "blocks until another client pushes"):
        bg = Later(DELAY, other.queue_push, k("late"), "pushed")
        got, seconds = timed(s.queue_pop, k("late"))
        bg.expect_ok("the other client's queue_push")
        expect(got == b"pushed" and seconds >= MIN_BLOCK, f"{got!r} after {seconds:.3f} s")
    with p.check("queue_pop", "blocking on an empty queue times out after the store timeout"):
        s.set_timeout(SHORT)
        err, seconds = attempt(s.queue_pop, k("q"))
        s.set_timeout(BASE_TIMEOUT)
        expect_error(err, seconds, DistStoreError, "timeout", MIN_BLOCK, MAX_TIMEOUT,
                     not_kind=QueueEmptyError)
        s.queue_push(k("q"), "after")
        got = s.queue_pop(k("q"), False)
        expect(got == b"after", f"the connection is not usable after the timeout: {got!r}")
    with p.check("queue_pop", "one push wakes one of two blocked poppers"):
        # Two clients blocked on one queue, one push: one gets the item, the other times out.
        # `other` is one of them, so that no group holds more than 3 connections at once (the
        # integration test's daemon allows 4).
        other.set_timeout(datetime.timedelta(seconds=1))
        poppers = [other, p.client(timeout=datetime.timedelta(seconds=1))]
        bgs = [Later(0, c.queue_pop, k("one")) for c in poppers]
        time.sleep(DELAY)
        s.queue_push(k("one"), "only")
        for bg in bgs:
            bg.finish()
        got = sorted([repr(bg.result) if bg.error is None else describe(bg.error) for bg in bgs])
        won = [bg for bg in bgs if bg.error is None]
        lost = [bg for bg in bgs if bg.error is not None]
        expect(len(won) == 1 and won[0].result == b"only" and len(lost) == 1
               and isinstance(lost[0].error, DistStoreError)
               and not isinstance(lost[0].error, QueueEmptyError)
               and "timeout" in str(lost[0].error), f"the two pops ended: {got}")
        expect(s.queue_len(k("one")) == 0, f"queue_len {s.queue_len(k('one'))} afterwards")


def check_queues_legacy(p):
    """use_libuv=False: the client refuses queues itself, before anything goes on the wire."""
    s, k = p.client(), p.keys("q")
    calls = [("queue_push", s.queue_push, (k("q"), "v")), ("queue_len", s.queue_len, (k("q"),)),
             ("queue_pop", s.queue_pop, (k("q"), False)), ("queue_pop", s.queue_pop, (k("q"),))]
    for name, fn, args in calls:
        with p.check(name, f"raises NotImplementedError on a legacy client, args {args[1:]}"):
            err, seconds = attempt(fn, *args)
            expect_error(err, seconds, NotImplementedError, LEGACY_QUEUE_MSG)
    with p.check("check", "the connection is fine after the refused queue calls"):
        s.set(k("after"), "1")
        expect(s.check([k("after")]) is True, "check of a key just set is not True")


def check_queue_as_key(p):
    """How a queue looks to the key commands; the queue is pushed by a libuv client even in the
    legacy pass, whose clients must see it the same way."""
    s, k = p.client(), p.keys("qk")
    pusher = p.client(use_libuv=True)
    n0 = s.num_keys()
    with p.check("queue_push", "an item pushed by a libuv client is counted by queue_len"):
        # queue_push has no reply: queue_len's reply on the same connection proves the server has
        # taken the push before another connection looks at the key.
        pusher.queue_push(k("q"), "item")
        expect(pusher.queue_len(k("q")) == 1, f"queue_len {pusher.queue_len(k('q'))}")
    with p.check("check", "True for a key that exists only as a non-empty queue"):
        expect(s.check([k("q")]) is True, "check of a non-empty queue is not True")
    with p.check("num_keys", "does not count queues"):
        expect(s.num_keys() == n0, f"{n0} before a queue_push, {s.num_keys()} after")
    with p.check("delete_key", "returns False for a queue and leaves it alone"):
        expect(s.delete_key(k("q")) is False, "delete_key of a queue did not return False")
        expect(pusher.queue_len(k("q")) == 1, f"queue_len {pusher.queue_len(k('q'))} afterwards")
    with p.check("get", "of a queue-only key returns b'' at once"):
        got, seconds = timed(s.get, k("q"))
        expect(got == b"" and seconds < AT_ONCE, f"{got!r} after {seconds:.3f} s")
    if "list_keys" in PUBLIC:
        with p.check("list_keys", "does not list queues"):
            expect(k("q") not in s.list_keys(), "the queue is listed")
    with p.check("check", "False once the queue is empty"):
        expect(pusher.queue_pop(k("q"), False) == b"item", "the pusher did not pop its item")
        expect(s.check([k("q")]) is False, "check of an emptied queue is not False")


def check_list_keys(p):
    s, k = p.client(), p.keys("lk")
    s.set(k("set"), "1")
    s.add(k("add"), 1)
    s.append(k("append"), "x")
    s.multi_set([k("multi")], ["y"])
    s.compare_set(k("cas"), "", "z")
    mine = {k(n) for n in ("set", "add", "append", "multi", "cas")}
    with p.check("list_keys", "a list of str holding every key this group stored"):
        got = s.list_keys()
        expect(isinstance(got, list) and all(isinstance(x, str) for x in got),
               f"returned {type(got).__name__} of {sorted({type(x).__name__ for x in got})}")
        # Every key of the server comes back; only ours (by prefix) are known.
        ours = {x for x in got if x.startswith(k(""))}
        expect(ours == mine, f"keys under {k('')!r}: {sorted(ours)}, expected {sorted(mine)}")
    with p.check("list_keys", "drops a deleted key"):
        s.delete_key(k("set"))
        ours = {x for x in s.list_keys() if x.startswith(k(""))}
        expect(ours == mine - {k("set")}, f"after delete_key: {sorted(ours)}")


def check_barrier(p):
    s, other, k = p.client(), p.client(), p.keys("bar")
    with p.check("barrier", "world_size 1 returns at once"):
        _, seconds = timed(s.barrier, k("one"), 1)
        expect(seconds < AT_ONCE, f"took {seconds:.3f} s")
    with p.check("barrier", "world_size 2 returns when a second client arrives"):
        bg = Later(DELAY, other.barrier, k("two"), 2, BASE_TIMEOUT)
        _, seconds = timed(s.barrier, k("two"), 2, BASE_TIMEOUT)
        bg.expect_ok("the second client's barrier")
        expect(seconds >= MIN_BLOCK, f"returned after {seconds:.3f} s, before the second arrived")
        expect(bg.seconds < AT_ONCE, f"the second client's barrier took {bg.seconds:.3f} s")
    with p.check("barrier", "world_size 2 alone raises after the timeout given"):
        err, seconds = attempt(s.barrier, k("alone"), 2, SHORT)
        expect_error(err, seconds, DistStoreError, "barrier timeout", MIN_BLOCK, MAX_TIMEOUT)
        s.set(k("after"), "ok")
        expect(s.get(k("after")) == b"ok", "the connection is not usable after the timeout")
    with p.check("barrier", "without a timeout it uses the store timeout"):
        s.set_timeout(SHORT)
        err, seconds = attempt(s.barrier, k("alone_default"), 2)
        s.set_timeout(BASE_TIMEOUT)
        expect_error(err, seconds, DistStoreError, "barrier timeout", MIN_BLOCK, MAX_TIMEOUT)
    if "list_keys" in PUBLIC:
        with p.check("list_keys", "lists the barriers' counter keys"):
            want = {k(n) for n in ("one", "two", "alone", "alone_default")}
            missing = want - set(s.list_keys())
            expect(not missing, f"not listed: {sorted(missing)}")


def run_pass(port, use_libuv):
    p = Pass(port, use_libuv)
    groups = [check_attributes, check_key_value, check_blocking, check_clone]
    if "queue_push" in PUBLIC:
        groups += [check_queues if use_libuv else check_queues_legacy, check_queue_as_key]
    if "list_keys" in PUBLIC:
        groups.append(check_list_keys)
    if "barrier" in PUBLIC:
        groups.append(check_barrier)
    for group in groups:
        p.run(group)
    untested = PUBLIC - p.tested
    if untested:
        why = "their checks failed or did not run" if p.failures else "no check exercises them"
        names = ", ".join(sorted(untested))
        p.failures.append(f"public TCPStore names not verified ({why}): {names}")
    return [f"[use_libuv={use_libuv}] {f}" for f in p.failures]


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        print("usage: store_torch_client.py PORT", file=sys.stderr)
        return 2
    port = int(sys.argv[1])
    try:  # one connection first, so that an absent server is one clear line, not dozens
        TCPStore(HOST, port, is_master=False, timeout=BASE_TIMEOUT)
    except Exception as err:  # noqa: BLE001
        print(f"store_torch_client: cannot connect to {HOST}:{port}: {describe(err)}",
              file=sys.stderr)
        return 1
    failures = run_pass(port, True) + run_pass(port, False)
    if failures:
        print(f"store_torch_client: {len(failures)} failure(s) against {HOST}:{port}",
              file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("torch client ok")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A background call that never returned (checked and reported above) would hold interpreter
    # shutdown inside C++; leave without waiting for it.
    if threading.active_count() > 1:
        os._exit(rc)
    sys.exit(rc)
