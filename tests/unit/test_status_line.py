"""The commands' progress line on a real terminal: a pseudo-terminal of a fixed width whose
bytes are replayed on a small screen model, so what a user would see is what is judged."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

from cnikit.scenarios.cli.status_line import CLEAR, FRAMES, fit

COLUMNS = 60

# Step lines printed the ways the commands print them, while a spinner shows long messages.
# Each step takes a moment, as a run's steps do, so a spinner that redraws on its own clock
# has drawn between them.
CHILD = """
import time

import click
from rich.console import Console
from cnikit.scenarios.cli.common import _progress

with _progress("demo [vpc-cni-1.18.3]") as say:
    for i in range(1, 6):
        say(f"step {i}: " + "waiting for the daemon to release an address " * 3)
        time.sleep(0.2)
        click.echo(f"  {i:>2}. +{i}.0s step line {i}")
    print("via print")
    Console(stderr=True).print("via rich", markup=False)
click.echo("after")
"""

CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


def screen(output: str, columns: int) -> tuple[list[str], bool]:
    """The lines a terminal `columns` wide shows after `output`, and whether any line wrapped."""
    rows: list[list[str]] = [[]]
    r = c = 0
    wrapped = False
    i = 0
    while i < len(output):
        m = CSI.match(output, i)
        if m:
            arg, op = m.groups()
            if op == "K" and arg == "2":
                rows[r] = []
            elif op == "A":
                r = max(r - int(arg or 1), 0)
            i = m.end()
            continue
        ch = output[i]
        i += 1
        if ch == "\r":
            c = 0
            continue
        if ch == "\n":
            r += 1
        elif c == columns:
            wrapped = True
            r, c = r + 1, 0
        if r == len(rows):
            rows.append([])
        if ch == "\n":
            continue
        row = rows[r]
        row.extend(" " * (c + 1 - len(row)))
        row[c] = ch
        c += 1
    return ["".join(row).rstrip() for row in rows], wrapped


def run_on_terminal(code: str, columns: int, timeout: float = 30.0) -> str:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], end - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.kill()
        proc.wait()
    return out.decode("utf-8", "replace")


def test_step_lines_print_on_clean_lines_and_the_spinner_never_wraps():
    out = run_on_terminal(CHILD, COLUMNS)
    assert any(f in out for f in FRAMES) and "step 3: waiting" in out, out  # the spinner ran
    lines, wrapped = screen(out, COLUMNS)
    assert not wrapped, lines
    drawn = [d for d in out.split(CLEAR) if d[:1] in FRAMES]
    assert drawn and all("\n" not in d for d in drawn), drawn  # the spinner keeps to one line
    want = [f"  {i:>2}. +{i}.0s step line {i}" for i in range(1, 6)]
    assert [ln for ln in lines if ln] == want + ["via print", "via rich", "after"], lines


def test_fit_keeps_one_line_short_of_the_width():
    assert fit("short", 40) == "short"
    assert fit("a\nb   c", 40) == "a b c"
    long = fit("x" * 200, 40)
    assert len(long) == 39 and long.endswith("…")
