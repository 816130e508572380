"""Wall time of each scenario (set-up and teardown included) and of the whole matrix.

Goals (issue 6): the upstream-3019 replay under 20 s per profile, including set-up and
teardown; the whole matrix (every scenario x every profile, one seed) under 10 minutes.
`--quick`: only the 3019 replay on each profile (the matrix goal is then not measured).
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPLAY = "imds-stale-equal-length"
REPLAY_GOAL_S = 20.0
MATRIX_GOAL_S = 600.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only the 3019 replay per profile")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out = {"bench": "scenarios", "quick": args.quick}
    if os.geteuid() != 0:
        out.update(error="needs root (network namespaces)", goal_met=False)
        print(json.dumps(out))
        return 0
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("fault_imds").setLevel(logging.CRITICAL)
    from cnikit import scenarios
    from cnikit.targets import builtin, builtin_names

    PROFILES = builtin_names()

    names = [REPLAY] if args.quick else scenarios.names()
    cells: dict = {}
    mismatches = []
    t0 = time.monotonic()
    for name in names:
        for profile in PROFILES:
            if not builtin(profile).runs(scenarios.get(name)):
                continue  # another address family
            r = scenarios.run(name, profile=profile, seed=args.seed)
            cells.setdefault(name, {})[profile] = {"seconds": r.seconds, "verdict": r.verdict,
                                                   "expected": r.expected}
            if r.expected is not None and r.verdict != r.expected:
                mismatches.append(f"{name} [{profile}]: {r.verdict} != {r.expected}")
            print(f"{name} [{profile}]: {r.verdict} {r.seconds:.1f}s", file=sys.stderr)
    total = round(time.monotonic() - t0, 1)
    replay = {p: c["seconds"] for p, c in cells[REPLAY].items()}
    replay_met = max(replay.values()) < REPLAY_GOAL_S
    out.update({
        "scenarios": cells,
        "replay_3019_seconds": replay,
        "matrix_seconds": None if args.quick else total,
        "runs": sum(len(v) for v in cells.values()),
        "verdict_mismatches": mismatches,
        "goal": f"3019 replay < {REPLAY_GOAL_S:.0f} s per profile; whole matrix < "
                f"{MATRIX_GOAL_S / 60:.0f} min",
        "goal_met": replay_met and (args.quick or total < MATRIX_GOAL_S) and not mismatches,
        "replay_goal_met": replay_met,
        "matrix_goal_met": None if args.quick else total < MATRIX_GOAL_S,
    })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
