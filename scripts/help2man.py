#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Builds a man page from a program's --help text and a hand-written template, so that the
options are documented once (the --help text, which the program's tests already check) and the
page never drifts from it.

    scripts/help2man.py TEMPLATE OUTPUT PROGRAM [ARG...]

runs `PROGRAM ARG... --help`, and writes TEMPLATE to OUTPUT with these replaced:
    @VERSION@   the first line of `PROGRAM --version` (or "")
    @OPTIONS@   the help text's option lines, by section, as .SS/.TP entries
    @HELP_TAIL@ the help text's paragraphs after its last option (its notes, exit codes), verbatim
The help text's layout: section headers end with ':' at column 0; an option line starts with two
spaces and '-', its description after two or more spaces or on the following lines, which are
indented further. Everything is escaped for roff (dashes as \\-, leading dots, backslashes).
"""
import re
import subprocess
import sys


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def convert(help_text):
    """Returns (options roff, tail lines) of a --help text."""
    lines = help_text.rstrip("\n").split("\n")
    out, tail = [], []
    cur = None  # [option, [description words]]
    last_opt = max((i for i, l in enumerate(lines) if re.match(r"^  -", l)), default=-1)
    # The description column: where most continuation lines start.
    indents = [len(l) - len(l.lstrip()) for l in lines[: last_opt + 1] if re.match(r"^\s{5,}\S", l)]
    col = max(set(indents), key=indents.count) if indents else 0

    def flush():
        nonlocal cur
        if cur is not None:
            out.append(".TP")
            out.append(".B " + roff(cur[0]))
            out.append(roff(" ".join(cur[1])) if cur[1] else "")
            cur = None

    for i, line in enumerate(lines):
        if i > last_opt:
            m = re.match(r"^(\s+)(\S.*)$", line)
            if cur is not None and m and len(m.group(1)) >= 5:
                cur[1].append(m.group(2))  # the last option's description goes on
                continue
            flush()
            tail.append(line)
            continue
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$", line)
        if m:
            flush()
            if m.group(2) is None and col and len(line) > col and line[col - 1] == " ":
                cur = [line[2:col].rstrip(), [line[col:]]]  # one space before the column
            else:
                cur = [m.group(1), [m.group(2)] if m.group(2) else []]
            continue
        m = re.match(r"^\s{5,}(\S.*)$", line)
        if m and cur is not None:
            cur[1].append(m.group(1))
            continue
        flush()
        h = re.match(r"^(\S.*):$", line)
        if h and not line.startswith("usage"):
            out.append(".SS " + roff(h.group(1)))
    flush()
    return "\n".join(out), tail


def main():
    template, output, prog = sys.argv[1], sys.argv[2], sys.argv[3:]
    help_text = subprocess.run(prog + ["--help"], capture_output=True, text=True).stdout
    if not help_text.strip():
        sys.exit("help2man: %s --help printed nothing" % " ".join(prog))
    ver = subprocess.run(prog + ["--version"], capture_output=True, text=True).stdout
    options, tail = convert(help_text)
    while tail and not tail[0].strip():
        tail.pop(0)
    tail_roff = ".nf\n" + "\n".join(roff(l) for l in tail) + "\n.fi" if tail else ""
    page = open(template).read()
    page = page.replace("@VERSION@", roff(ver.strip().split("\n")[0]) if ver.strip() else "")
    page = page.replace("@OPTIONS@", options).replace("@HELP_TAIL@", tail_roff)
    open(output, "w").write(page)


if __name__ == "__main__":
    main()
