"""Timing bugs seen on a busy machine: certify the per-pod EC2 IPAM fixture build without an
IP cooldown, and its correct variant, again and again beside CPU hogs (tests/under_load.py:
two busy processes per core by default, as a shared CI runner has).

Goal (issue 41): the no-cooldown build FAILED with `early-reuse` in at least 9 of 10 tries,
the correct one CERTIFIED (not INSUFFICIENT) in at least 9 of 10. Before the adaptive time
scale, a busy machine left the scenarios that catch early reuse inconclusive ("too slow for
the time scale") and the bug unseen.

    bench/bench_under_load.py [--tries 10 | --quick] [--hogs N] [-s SCENARIO ...] [--jobs J]

`-s` limits each certification to those scenarios (default: the four whose races a busy
machine lost: ip-reuse-cooldown, burst-moves-node, restart-after-delete and
released-address-comes-back). Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILDS = ROOT / "tests" / "builds" / "ec2_per_pod"
FIXTURES = {"no-cooldown": BUILDS / "ec2-per-pod-no-cooldown.toml",
            "correct": BUILDS / "ec2-per-pod.toml"}
RACES = ["ip-reuse-cooldown", "burst-moves-node", "restart-after-delete",
         "released-address-comes-back"]
GOAL = 9


def certify(target: Path, scenarios: list[str], jobs: int | None, hogs: int) -> dict:
    """One certification beside the hogs: its verdict, the violation kinds, what was slowed."""
    with tempfile.TemporaryDirectory(prefix="cnikit-bench-") as d:
        cmd = [sys.executable, str(ROOT / "tests" / "under_load.py"), "--hogs", str(hogs),
               "--limit", "900", "--", sys.executable, "-m", "cnikit.cli", "certify",
               str(target), "--seeds", "1", "--report", d]
        cmd += [x for s in scenarios for x in ("-s", s)]
        if jobs:
            cmd += ["--jobs", str(jobs)]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
        try:
            doc = json.loads((Path(d) / "certificate.json").read_text())
        except (OSError, ValueError):
            return {"verdict": "error", "exit": p.returncode, "tail": p.stdout[-500:]}
    runs = doc.get("runs", [])
    kinds = sorted({line.split(": ", 1)[0].split()[-1] for r in runs
                    for line in r.get("evidence") or [] if ": " in line})
    return {"verdict": doc["verdict"], "exit": p.returncode,
            "seconds": round(time.monotonic() - t0, 1),
            "early_reuse": any("early-reuse" in line for r in runs
                               for line in r.get("evidence") or []),
            "kinds": kinds,
            "too_slow": [r["scenario"] for r in runs if r.get("too_slow")
                         and r["verdict"] != "violation"],
            "slowed": {r["scenario"]: r.get("scale") for r in runs if r.get("attempts")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 tries of each")
    ap.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 1))
    ap.add_argument("-s", "--scenario", action="append", default=None)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--only", choices=sorted(FIXTURES), default=None)
    args = ap.parse_args()
    if args.quick:
        args.tries = 3
    out: dict = {"bench": "under_load", "hogs": args.hogs, "tries": args.tries}
    if os.geteuid() != 0:
        out.update(error="needs root (network namespaces)", goal_met=False)
        print(json.dumps(out))
        return 0
    scenarios = args.scenario or RACES
    out["scenarios"] = scenarios
    results: dict[str, list[dict]] = {}
    for name, target in FIXTURES.items():
        if args.only and name != args.only:
            continue
        for i in range(args.tries):
            r = certify(target, scenarios, args.jobs, args.hogs)
            results.setdefault(name, []).append(r)
            print(f"{name} try {i + 1}: {r['verdict']} {r.get('seconds')}s "
                  f"early-reuse={r.get('early_reuse')} too_slow={r.get('too_slow')} "
                  f"slowed={r.get('slowed')}", file=sys.stderr, flush=True)
    caught = sum(1 for r in results.get("no-cooldown", [])
                 if r["verdict"] == "failed" and r.get("early_reuse"))
    certified = sum(1 for r in results.get("correct", []) if r["verdict"] == "certified")
    out.update(results=results, no_cooldown_caught=caught, correct_certified=certified,
               goal=f"no-cooldown FAILED with early-reuse >= {GOAL}/10; correct CERTIFIED "
                    f">= {GOAL}/10",
               goal_met=caught >= GOAL * args.tries / 10 and certified >= GOAL * args.tries / 10)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
