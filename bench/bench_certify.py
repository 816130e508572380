"""`cnikit certify` on the hardened build, side by side with the matrix's hardened column.

Both run the same scenarios with one seed each, `--jobs` runs at once (2 by default, as CI
runs them), in this one process, one after the other:
certify drives a target file for the reference daemon (its command line, observed from
outside); the matrix column drives the built-in `hardened` profile. Goal (issue 11): certify
within 15% of the matrix column's wall time, and under 3 minutes on 2 cores.
`--quick`: only the 3019 replay in both. Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATIO_GOAL = 1.15
WALL_GOAL_S = 180.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only the 3019 replay")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once in both (default 2)")
    args = ap.parse_args()
    out: dict = {"bench": "certify", "quick": args.quick, "jobs": args.jobs}
    if os.geteuid() != 0:
        out.update(error="needs root (network namespaces)", goal_met=False)
        print(json.dumps(out))
        return 0
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("fault_imds").setLevel(logging.CRITICAL)
    from cnikit import scenarios
    from cnikit.certify import certify, template
    from cnikit.scenarios.matrix import run_matrix

    only = ["imds-stale-equal-length"] if args.quick else scenarios.names()
    with tempfile.TemporaryDirectory(prefix="bench-certify-") as tmp:
        target = template.write(Path(tmp) / "hardened.toml", profile="hardened")
        t0 = time.monotonic()
        m = run_matrix(only, ["hardened"], 1, progress=lambda msg: None, jobs=args.jobs,
                       report_root=Path(tmp) / "matrix")
        matrix_s = time.monotonic() - t0
        print(f"matrix column: {matrix_s:.1f}s", file=sys.stderr)
        t0 = time.monotonic()
        cert = certify(str(target), seeds=1, report_dir=Path(tmp) / "certify", only=only,
                       jobs=args.jobs,
                       on_result=lambda r, k, n: print(f"[{k}/{n}] {r['scenario']}: "
                                                       f"{r['verdict']} {r['seconds']:.1f}s",
                                                       file=sys.stderr))
        certify_s = time.monotonic() - t0
    ratio = certify_s / matrix_s if matrix_s else None
    out.update({
        "scenarios": len(only),
        "matrix_hardened_seconds": round(matrix_s, 1),
        "certify_seconds": round(certify_s, 1),
        "ratio": round(ratio, 3) if ratio else None,
        "certify_verdict": cert.verdict,
        "matrix_verdicts": {n: row["hardened"]["verdict"] for n, row in m.items()},
        "certify_verdicts": {r["scenario"]: r["verdict"] for r in cert.runs},
        "goal": f"certify <= {RATIO_GOAL:.2f}x the matrix's hardened column and < "
                f"{WALL_GOAL_S:.0f} s",
        "goal_met": bool(ratio and ratio <= RATIO_GOAL and certify_s < WALL_GOAL_S
                         and cert.verdict == "certified"),
    })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
