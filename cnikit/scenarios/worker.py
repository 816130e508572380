"""One scenario run in a process of its own (`--jobs N` runs N of these at once).

A run's moto, gate, IMDS, namespaces and run id are its own, so runs in separate
processes never share state: moto keeps one backend per process.

    python -m cnikit.scenarios.worker '{"scenario": ..., "seed": 1, "target": ..., "root": ...}'

prints the run's record (cnikit.scenarios.parallel.run_record) as one JSON line on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from cnikit import scenarios
    from cnikit.errors import CnikitError
    from cnikit.fabric.cleanup import cleanup_on_signals
    from cnikit.scenarios.cli import _quiet_logs
    from cnikit.scenarios.parallel import run_record

    spec = json.loads(argv[0])
    _quiet_logs()
    name, seed = spec["scenario"], spec["seed"]
    root = Path(spec["root"])
    try:
        with cleanup_on_signals():  # stopped by the pool: tear the run down, then exit
            r = scenarios.run_scenario(scenarios.get(name), target=spec["target"], seed=seed,
                                       report_dir=spec.get("report_dir")
                                       or root / name / f"seed{seed}",
                                       ec2=spec.get("ec2", "moto"),
                                       ec2_endpoint=spec.get("ec2_endpoint"),
                                       duration=spec.get("duration"))
    except CnikitError as e:
        print(f"cnikit: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cnikit: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(run_record(r, name, seed, root), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
