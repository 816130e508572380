"""Run a command beside a CPU hog: `python tests/under_load.py [--hogs N] -- COMMAND...`.

`make test-under-load` runs the suite so, with twice as many busy processes as the machine
has cores: the load a shared CI runner puts beside it. A verdict must not change under it
(or the run must say the machine was too slow); a test that fails only here waits on a time
where it should wait on a condition.

The hogs are plain busy loops at normal priority, tied to this process (they die with it,
however it ends) and bounded in time; the exit code is the command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

HOG = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end: pass\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hogs", type=int, default=2 * os.cpu_count(),
                    help="busy processes (default: twice the cores)")
    ap.add_argument("--limit", type=float, default=3600.0,
                    help="seconds after which a hog stops by itself (default 3600)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to run after --")
    from cnikit.reaper import tied

    hogs = [subprocess.Popen(tied([sys.executable, "-c", HOG.format(limit=args.limit)]))
            for _ in range(args.hogs)]
    print(f"under load: {args.hogs} busy processes beside `{' '.join(command)}`", flush=True)
    start = time.monotonic()
    try:
        code = subprocess.call(command)
    except KeyboardInterrupt:
        code = 130
    finally:
        for h in hogs:
            h.send_signal(signal.SIGKILL)
            h.wait()
    print(f"under load: exit {code} after {time.monotonic() - start:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
