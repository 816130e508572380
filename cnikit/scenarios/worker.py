"""Scenario runs in a process of their own (`--jobs N` keeps N of these busy).

A run's moto, gate, IMDS, namespaces and run id are its own; moto keeps one backend per
process and a run starts it clean, so the runs one worker takes one after another never
share state either. A worker lives for many runs: a fresh process spent about 3.5 s of CPU
on imports and on parsing EC2's service model before each run (measured: 4.8 s of the
kit's own CPU for a first run, 1.1-1.35 s for the next ones), a third of a run's CPU.

    python -m cnikit.scenarios.worker '{"scenario": ..., "seed": 1, "target": ..., "root": ...}'

runs one and prints its record (cnikit.scenarios.parallel.run_record) as one JSON line on
stdout. With `--serve` it reads one such spec a line on stdin and answers each with one
line: the record, or {"worker_error": why} when the spec cannot run; it ends at EOF.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def run_one(spec: dict) -> dict:
    from cnikit import scenarios
    from cnikit.scenarios.parallel import run_dir, run_record

    name, seed = spec["scenario"], spec["seed"]
    root = Path(spec["root"])
    r = scenarios.run_scenario(scenarios.get(name), target=spec["target"], seed=seed,
                               report_dir=spec.get("report_dir") or run_dir(root, name, seed),
                               ec2=spec.get("ec2", "moto"), ec2_endpoint=spec.get("ec2_endpoint"),
                               duration=spec.get("duration"))
    return run_record(r, name, seed, root)


def serve() -> int:
    from cnikit.errors import CnikitError

    # Answers go to a copy of stdout; whatever else writes to fd 1 (a library, a child the
    # run starts) goes to stderr instead of into the answers.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            rec = run_one(json.loads(line))
        except CnikitError as e:
            rec = {"worker_error": str(e)}
        answers.write(json.dumps(rec, default=str) + "\n")
        answers.flush()
    return 0


def main(argv: list[str]) -> int:
    from cnikit.errors import CnikitError
    from cnikit.fabric.cleanup import cleanup_on_signals
    from cnikit.scenarios.cli.common import _quiet_logs
    from faultcore import gc_policy

    gc_policy.relax()
    _quiet_logs()
    try:
        with cleanup_on_signals():  # stopped by the pool: tear the run down, then exit
            if argv == ["--serve"]:
                return serve()
            rec = run_one(json.loads(argv[0]))
    except CnikitError as e:
        print(f"cnikit: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cnikit: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(rec, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
