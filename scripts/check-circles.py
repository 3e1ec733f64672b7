#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the files of ddprun's libraries call each other one way (docs/ARCHITECTURE.md,
"Layers", "Circles").

From the symbol tables (nm) of the objects of the five libraries (common, rendezvous,
worker_template, agent, launcher) under $BUILD/obj (BUILD defaults to build), this builds the
graph of files: A -> B when A's object uses a symbol that B's object defines. A circle is a
strongly connected group of two or more files: each reaches every other, so none can be read,
tested or changed without the rest. Objects whose source file is gone (left over from a rename)
are not counted.

It prints TAP lines:
  - one per circle in ALLOWED: ok while the circle is there as listed, not ok when it is gone or
    has changed (the list must then say what is there now);
  - one not ok per circle that ALLOWED does not list, with the calls that close it.
When the objects are missing it says so in a not ok line (run make first). Exit 0 when every line
is ok.

--start N numbers the first line N (for a suite that prints other TAP lines first)."""
import argparse
import collections
import os
import subprocess
import sys

LIBS = ["common", "rendezvous", "worker_template", "agent", "launcher"]
DOC = 'docs/ARCHITECTURE.md, "Circles"'

# The circles that may stay, each with why in one line (docs/ARCHITECTURE.md, "Circles"). A file
# is named by its source path without the extension. Remove an entry once its circle is broken.
ALLOWED = [
    (["agent/agent", "agent/assignment", "agent/gpu_wait", "agent/group", "agent/hang",
      "agent/job", "agent/metrics", "agent/node_check", "agent/rdzv", "agent/rdzv_barrier",
      "agent/rdzv_link", "agent/rdzv_ops", "agent/scratch", "agent/session", "agent/store",
      "agent/supervise", "agent/worker"],
     "supervision's table and its callbacks: every part sends its events to agent__event, whose "
     "cells call the parts"),
]

DEFINED = set("BCDGRSTVW")  # nm's letters for a symbol this object defines (data, code, weak)
SOURCE_EXTS = (".c", ".cu")


def object_files(root, obj_dir):
    """Yields (file, object path) for each library object whose source still exists; a file is
    its source path relative to root without the extension."""
    for lib in LIBS:
        for dirpath, _, names in sorted(os.walk(os.path.join(obj_dir, lib))):
            for name in sorted(names):
                if not name.endswith(".o"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, obj_dir)[:-2]
                if any(os.path.exists(os.path.join(root, rel + ext)) for ext in SOURCE_EXTS):
                    yield rel, path


def symbols(path):
    """The global symbols the object at path defines and those it uses."""
    out = subprocess.run(["nm", "-g", path], capture_output=True, text=True, check=True).stdout
    defines, uses = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            uses.add(parts[1])
        elif len(parts) == 3 and parts[1] in DEFINED:
            defines.add(parts[2])
    return defines, uses


def file_graph(objects):
    """The graph of files: graph[a][b] is the sorted symbols of b's that a uses (a != b)."""
    defines, uses = {}, {}
    for name, path in objects:
        defines[name], uses[name] = symbols(path)
    owner = {}
    for name in sorted(defines):
        for sym in defines[name]:
            owner.setdefault(sym, name)
    graph = {name: collections.defaultdict(list) for name in defines}
    for name in sorted(uses):
        for sym in sorted(uses[name]):
            target = owner.get(sym)
            if target is not None and target != name:
                graph[name][target].append(sym)
    return graph


def circles(graph):
    """The strongly connected groups of two or more files (Tarjan's algorithm, without
    recursion), each sorted, in a stable order."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def crossing_calls(graph, group):
    """TAP comment lines naming the calls between the files of group (a few symbols per edge)."""
    members = set(group)
    lines = []
    for name in group:
        for target in sorted(t for t in graph[name] if t in members):
            syms = graph[name][target]
            more = f" and {len(syms) - 3} more" if len(syms) > 3 else ""
            lines.append(f"#   {name} -> {target}: {', '.join(syms[:3])}{more}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=1, help="number of the first TAP line")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.environ.get("BUILD", "build")
    obj_dir = os.path.join(root, build, "obj")
    n = args.start
    objects = list(object_files(root, obj_dir))
    missing = [lib for lib in LIBS if not any(name.startswith(lib + "/") for name, _ in objects)]
    if missing:
        print(f"not ok {n} - circles of files: no objects of {', '.join(missing)} under "
              f"{os.path.join(build, 'obj')} (run make first)")
        return 1
    graph = file_graph(objects)
    present = circles(graph)
    failed = False
    for files, reason in ALLOWED:
        group = sorted(files)
        if group in present:
            print(f"ok {n} - allowed circle: {' '.join(group)} ({reason}; {DOC})")
        else:
            failed = True
            inside = [g for g in present if set(g) <= set(group)]
            now = f"; now {' | '.join(' '.join(g) for g in inside)}" if inside else ""
            print(f"not ok {n} - allowed circle gone or changed, update ALLOWED in "
                  f"scripts/check-circles.py: {' '.join(group)}{now}")
        n += 1
    allowed = [sorted(files) for files, _ in ALLOWED]
    for group in present:
        if group in allowed:
            continue
        failed = True
        print(f"not ok {n} - circle of files: {' '.join(group)} (each calls the others: make the "
              f"calls run one way, {DOC})")
        for line in crossing_calls(graph, group):
            print(line)
        n += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
