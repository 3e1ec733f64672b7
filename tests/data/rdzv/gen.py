#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the golden store frames: tests/data/rdzv/<case>/{input.bin,expect[,limits]}.

Each input.bin holds raw request bytes exactly as a client sends them (PyTorch c10d TCPStore
wire format: 1-byte command, u64 little-endian lengths, native integers). Each expect file is
written by hand here, not computed from the parser: one line per frame the parser must find,
then a last line `end`, `incomplete need=N` or `error CODE at OFFSET: TEXT`.
tests/unit/test_rdzv_frame.c checks the parser against every case; docs/protocol.md links them.
Run from the repository root: python3 tests/data/rdzv/gen.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x3C85F7CE


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def blob(b):
    return u64(len(b)) + b


def keys(*ks):
    return u64(len(ks)) + b"".join(blob(k) for k in ks)


CASES = {}


def case(name, data, expect, limits=None):
    CASES[name] = (data, expect, limits)


# --- well-formed requests, one per command ---
case("validate", u8(0) + u32(MAGIC), "VALIDATE magic=0x3c85f7ce\nend")
case("validate_bad_magic", u8(0) + u32(0xDEADBEEF), "VALIDATE magic=0xdeadbeef\nend")
case("set", u8(1) + blob(b"a/b") + blob(b"hello"), "SET key='a/b' value_len=5\nend")
case("set_empty_value", u8(1) + blob(b"k") + blob(b""), "SET key='k' value_len=0\nend")
case("set_binary_key", u8(1) + blob(b"\x00\xff'") + blob(b"v"),
     "SET key='\\x00\\xff\\x27' value_len=1\nend")
case("compare_set", u8(2) + blob(b"k") + blob(b"old") + blob(b"newer"),
     "COMPARE_SET key='k' expected_len=3 desired_len=5\nend")
case("get", u8(3) + blob(b"r1/nccl/0"), "GET key='r1/nccl/0'\nend")
case("add", u8(4) + blob(b"count") + i64(-3), "ADD key='count' delta=-3\nend")
case("check", u8(5) + keys(b"a", b"bb"), "CHECK keys=2 'a' 'bb'\nend")
case("wait", u8(6) + keys(b"barrier/done"), "WAIT keys=1 'barrier/done'\nend")
case("wait_zero_keys", u8(6) + keys(), "WAIT keys=0\nend")
case("getnumkeys", u8(7), "GETNUMKEYS\nend")
case("delete_key", u8(8) + blob(b"gone"), "DELETE_KEY key='gone'\nend")
case("append", u8(9) + blob(b"log") + blob(b"line\n"), "APPEND key='log' value_len=5\nend")
case("multi_get", u8(10) + keys(b"x", b"y", b"z"), "MULTI_GET keys=3 'x' 'y' 'z'\nend")
case("multi_set", u8(11) + u64(2) + blob(b"x") + blob(b"1") + blob(b"yy") + blob(b"22"),
     "MULTI_SET keys=2 'x'=1 'yy'=2\nend")
case("cancel_wait", u8(12), "CANCEL_WAIT\nend")
case("ping", u8(13) + u32(4242), "PING nonce=4242\nend")
case("queue_push", u8(14) + blob(b"/q") + blob(b"item"), "QUEUE_PUSH key='/q' value_len=4\nend")
case("queue_pop", u8(15) + blob(b"/q"), "QUEUE_POP key='/q'\nend")
case("queue_len", u8(16) + blob(b"/q"), "QUEUE_LEN key='/q'\nend")
case("list_keys", u8(17), "LIST_KEYS\nend")
case("barrier", u8(18) + blob(b"/bar") + i64(4), "BARRIER key='/bar' world_size=4\nend")
# A blocking queue_pop as PyTorch's client sends it: WAIT on the key, then QUEUE_POP.
case("queue_pop_blocking", u8(6) + keys(b"/q") + u8(15) + blob(b"/q"),
     "WAIT keys=1 '/q'\nQUEUE_POP key='/q'\nend")
case("auth_hello", u8(0x40) + bytes(range(32)), "AUTH_HELLO payload=32\nend")
case("auth_hello_run", u8(0x44) + bytes(range(32)) + blob(b"job-7"),
     "AUTH_HELLO_RUN payload=32 run='job-7'\nend")
case("auth_hello_run_empty", u8(0x44) + bytes(32) + blob(b""),
     "error DDP_EFRAME at 33: the run id is empty or not printable ASCII")
case("auth_hello_run_control", u8(0x44) + bytes(32) + blob(b"a\x1bb"),
     "error DDP_EFRAME at 33: the run id is empty or not printable ASCII")
case("auth_hello_run_too_long", u8(0x44) + bytes(32) + blob(b"r" * 129),
     "error DDP_ETOOBIG at 33: run id length 129 exceeds 128")
case("auth_proof", u8(0x41) + bytes(32), "AUTH_PROOF payload=32\nend")
case("get_wait", u8(0x42) + blob(b"id") + u8(0), "GET_WAIT key='id' mode=0\nend")
case("get_wait_nowait", u8(0x42) + blob(b"id") + u8(1), "GET_WAIT key='id' mode=1\nend")
case("stats", u8(0x43), "STATS\nend")
case("pipelined_handshake",
     u8(0) + u32(MAGIC) + u8(13) + u32(7) + u8(1) + blob(b"k") + blob(b"v") + u8(3) + blob(b"k"),
     "VALIDATE magic=0x3c85f7ce\nPING nonce=7\nSET key='k' value_len=1\nGET key='k'\nend")

# --- incomplete frames: the parser waits and says how many bytes it needs ---
case("empty", b"", "incomplete need=1")
case("truncated_length", u8(1) + b"\x03\x00\x00", "incomplete need=9")
case("truncated_key", u8(1) + u64(3) + b"a", "incomplete need=12")
case("truncated_value", u8(1) + blob(b"abc") + u64(10) + b"01234",
     "incomplete need=30")
case("truncated_ping", u8(13) + b"\x01\x02", "incomplete need=5")
case("truncated_barrier", u8(18) + blob(b"/bar") + b"\x02\x00", "incomplete need=21")
case("truncated_multi_set", u8(11) + u64(2) + blob(b"x") + blob(b"1") + blob(b"yy"),
     "incomplete need=45")
case("truncated_after_frame", u8(7) + u8(3) + u64(5) + b"ab",
     "GETNUMKEYS\nincomplete need=14")

# --- hostile frames: the server closes the connection with this text ---
case("unknown_command", u8(0x13) + blob(b"q") + blob(b"v"),
     "error DDP_EFRAME at 0: unknown command 0x13")
case("unknown_command_ff", u8(0xFF), "error DDP_EFRAME at 0: unknown command 0xff")
case("frame_then_garbage", u8(13) + u32(1) + u8(0x77) + b"junk",
     "PING nonce=1\nerror DDP_EFRAME at 0: unknown command 0x77")
case("key_too_long", u8(3) + u64(8193) + b"k" * 8193,
     "error DDP_ETOOBIG at 1: key length 8193 exceeds 8192")
case("key_max_len", u8(3) + u64(8192) + b"k" * 8192, "GET key='" + "k" * 64 + "...'\nend")
case("negative_key_len", u8(1) + i64(-1) + blob(b"v"),
     "error DDP_ETOOBIG at 1: key length 18446744073709551615 exceeds 8192")
case("negative_value_len", u8(1) + blob(b"k") + i64(-8),
     "error DDP_ETOOBIG at 10: value length 18446744073709551608 exceeds 8388608")
case("queue_push_value_too_long", u8(14) + blob(b"/q") + u64(8 * 1024 * 1024 + 1),
     "error DDP_ETOOBIG at 11: value length 8388609 exceeds 8388608")
case("queue_pop_key_too_long", u8(15) + u64(8193),
     "error DDP_ETOOBIG at 1: key length 8193 exceeds 8192")
case("value_too_long", u8(9) + blob(b"k") + u64(8 * 1024 * 1024 + 1),
     "error DDP_ETOOBIG at 10: value length 8388609 exceeds 8388608")
case("cas_desired_too_long", u8(2) + blob(b"k") + blob(b"") + u64(1 << 40),
     "error DDP_ETOOBIG at 18: desired value length 1099511627776 exceeds 8388608")
case("too_many_keys", u8(5) + u64(128 * 1024 + 1),
     "error DDP_ETOOBIG at 1: key count 131073 exceeds 131072")
case("too_many_keys_huge", u8(6) + i64(-1),
     "error DDP_ETOOBIG at 1: key count 18446744073709551615 exceeds 131072")
case("multi_set_value_too_long", u8(11) + u64(1) + blob(b"k") + u64(9 << 20),
     "error DDP_ETOOBIG at 18: value length 9437184 exceeds 8388608")
case("get_wait_bad_mode", u8(0x42) + blob(b"id") + u8(7),
     "error DDP_EFRAME at 11: GET_WAIT mode 7 is not 0 or 1")
case("frame_too_big", u8(1) + blob(b"k") + blob(b"v" * 100),
     "error DDP_ETOOBIG at 18: value makes the frame longer than 64 bytes",
     limits="max_frame=64")
case("multi_get_frame_too_big", u8(10) + keys(*[b"key%02d" % i for i in range(8)]),
     "error DDP_ETOOBIG at 74: key makes the frame longer than 80 bytes",
     limits="max_frame=80")


def main():
    for name, (data, expect, limits) in sorted(CASES.items()):
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "input.bin"), "wb") as f:
            f.write(data)
        with open(os.path.join(d, "expect"), "w") as f:
            f.write(expect + "\n")
        lp = os.path.join(d, "limits")
        if limits:
            with open(lp, "w") as f:
                f.write(limits + "\n")
        elif os.path.exists(lp):
            os.remove(lp)
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
