"""Run every bench/bench_*.py and merge their JSON into one file.

Each script prints exactly one JSON object on stdout. A script that fails is
recorded with its error instead of stopping the others.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    ap.add_argument("--quick", action="store_true", help="pass --quick to every script")
    ap.add_argument("only", nargs="*", help="area names to run (e.g. gate imds)")
    args = ap.parse_args()

    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.only]
    results: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "results": {},
    }
    for script in scripts:
        name = script.stem.removeprefix("bench_")
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600)
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            data = {"error": f"exit {proc.returncode}, no JSON on stdout"}
        data.setdefault("wall_seconds", round(time.monotonic() - t0, 1))
        results["results"][name] = data
        print(f"bench: {name}: {json.dumps(data)[:400]}", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"bench: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
