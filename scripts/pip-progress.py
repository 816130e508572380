#!/usr/bin/env python3
"""Filter pip's output into a few progress lines: `pip install ... 2>&1 | pip-progress.py`.

A fresh `make setup` installs about a hundred packages in a few minutes; pip's --quiet
showed nothing all that time, and its full output is a page per package. This prints how
far it is, at most every few seconds (packages resolved and downloaded, what it is fetching
now, elapsed time), then what it installs, and passes warnings and errors through.
Standard library only: it runs before the venv has anything.
"""

from __future__ import annotations

import re
import sys
import time

EVERY_S = 5.0
# What pip prints that is noise here (setuptools' warnings about the project's own build).
NOISE = re.compile(r"is ignored: it is neither|BuildBackendWarning|^ *!!|^ *\*\*\*|^ *$")
PASS = re.compile(r"^(ERROR|WARNING|error|  error)")
COLLECTING = re.compile(r"^Collecting (\S+)")
DOWNLOADING = re.compile(r"^ *Downloading (\S+?)(?:-\d[^ ]*)? \(([^)]+)\)")
INSTALLING = re.compile(r"^Installing collected packages: (.*)")


def main() -> int:
    label = sys.argv[1] if len(sys.argv) > 1 else "pip"
    start = last = time.monotonic()
    collected = downloaded = 0
    now_fetching, installing = "", False
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        if NOISE.search(line):
            continue
        if m := COLLECTING.match(line):
            collected += 1
            now_fetching = m.group(1)
        elif m := DOWNLOADING.match(line):
            downloaded += 1
            now_fetching = f"{m.group(1).rsplit('/', 1)[-1]} ({m.group(2)})"
        elif m := INSTALLING.match(line):
            n = len(m.group(1).split(","))
            print(f"cnikit: {label}: installing {n} packages "
                  f"({time.monotonic() - start:.0f} s so far)", flush=True)
            installing = True
            continue
        elif PASS.match(line):
            print(line, flush=True)
            continue
        if not installing and time.monotonic() - last >= EVERY_S and (collected or downloaded):
            print(f"cnikit: {label}: {collected} packages resolved, {downloaded} downloaded, "
                  f"{time.monotonic() - start:.0f} s: {now_fetching}", flush=True)
            last = time.monotonic()
    print(f"cnikit: {label}: ended after {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
