#!/usr/bin/env python3
"""PyTorch's own TCPStore client (torch 2.x, libuv) against a ddp-rendezvous --no-auth server:
store_torch_client.py PORT. Exercises set/get/add/check/compare_set/num_keys/delete_key/append/
multi_set/multi_get, a wait that times out (CANCEL_WAIT) and a get released by another client.
Prints "torch client ok" and exits 0 when every reply is what TCPStore itself returns."""
import datetime
import sys
import threading

from torch.distributed import TCPStore


def main():
    port = int(sys.argv[1])
    t = datetime.timedelta(seconds=5)
    s = TCPStore("127.0.0.1", port, is_master=False, use_libuv=True, timeout=t)
    s.set("a", "hello")
    assert s.get("a") == b"hello"
    assert s.add("n", 3) == 3 and s.add("n", 4) == 7
    assert s.check(["a", "n"]) and not s.check(["a", "zz"])
    assert s.compare_set("a", "hello", "world") == b"world"
    assert s.compare_set("a", "x", "y") == b"world"
    assert s.compare_set("nokey", "exp", "v") == b"exp"
    assert s.num_keys() >= 2
    assert s.delete_key("n") and not s.delete_key("n")
    s.append("log", "ab")
    s.append("log", "cd")
    assert s.get("log") == b"abcd"
    s.multi_set(["m1", "m2"], ["x", "y"])
    assert s.multi_get(["m1", "m2"]) == [b"x", b"y"]
    try:
        s.wait(["never"], datetime.timedelta(milliseconds=200))
        raise AssertionError("wait did not time out")
    except RuntimeError:
        pass  # DistStoreError after CANCEL_WAIT
    assert s.get("a") == b"world"  # the connection is still in step
    other = TCPStore("127.0.0.1", port, is_master=False, use_libuv=True, timeout=t)
    threading.Timer(0.2, lambda: other.set("late", "v")).start()
    assert s.get("late") == b"v"
    print("torch client ok")


if __name__ == "__main__":
    main()
