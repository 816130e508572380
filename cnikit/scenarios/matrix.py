"""The matrix: every scenario against every target, run in this process or in workers
(cnikit.scenarios.parallel), its cells and matrix.json. `cnikit matrix` is
cnikit.scenarios.cli.matrix; `cnikit report merge` joins the matrix.json files."""

from __future__ import annotations

import json
from pathlib import Path

from cnikit.errors import UsageError


def matrix_cells(names: list[str], columns: list, seeds: int, first_seed: int = 1) -> list:
    """(scenario, target, seed) for every run of the matrix: a scenario meets only the
    builds of its address family (Target.runs), the IP-family axis."""
    from cnikit import scenarios

    return [(name, tgt, seed) for name in names for tgt in columns
            if tgt.runs(scenarios.get(name))
            for seed in range(first_seed, first_seed + seeds)]


def run_matrix(names: list[str], profiles: list, seeds: int, first_seed: int = 1,
               report_root: Path | None = None, progress=None, duration: float | None = None,
               on_result=None, jobs: int = 1, shard: tuple[int, int] | None = None,
               on_start=None) -> dict:
    """{scenario: {target: {"verdict", "seconds", "report", "expected", "runs": [...]}}};
    profiles: built-in names, target files or Targets (a column each).

    jobs > 1: that many runs at once, each in its own process (cnikit.scenarios.parallel);
    shard (I, N): only the I-th of N deterministic shares of scenario x target x seed.
    on_start(cell) and on_result(cell, run) get cell = (scenario, target, seed)."""
    from cnikit import scenarios
    from cnikit.scenarios.parallel import past_seconds, run_specs, take_shard, target_ref
    from cnikit.targets import resolve_target

    columns = [resolve_target(p) for p in profiles]
    cells = take_shard(matrix_cells(names, columns, seeds, first_seed), shard)

    def rdir(cell) -> Path | None:
        name, tgt, seed = cell
        return None if report_root is None else Path(report_root) / name / f"{tgt.name}-seed{seed}"

    runs: dict[tuple[str, str], list[dict]] = {}

    def done(cell, run: dict) -> None:
        runs.setdefault((cell[0], cell[1].name), []).append(run)
        if on_result is not None:
            on_result(cell, run)

    if jobs == 1:
        for cell in cells:
            if on_start is not None:
                on_start(cell)
            name, tgt, seed = cell
            r = scenarios.run_scenario(scenarios.get(name), target=tgt, seed=seed,
                                       report_dir=rdir(cell), progress=progress,
                                       duration=duration)
            done(cell, {"seed": seed, "verdict": r.verdict, "seconds": r.seconds,
                        "report": r.report.get("html") or r.report.get("json"),
                        "error": r.error, "evidence": r.evidence(3),
                        "precondition": r.precondition})
    else:
        if report_root is None:
            raise UsageError("runs in parallel need a report directory")

        def spec(cell) -> dict:
            return {"scenario": cell[0], "seed": cell[2], "target": target_ref(cell[1]),
                    "root": str(report_root), "report_dir": str(rdir(cell)),
                    "duration": duration}

        def finished(cell, rec: dict) -> None:
            report = rec.get("report")
            done(cell, {"seed": cell[2], "verdict": rec["verdict"], "seconds": rec["seconds"],
                        "report": str(Path(report_root) / report) if report else None,
                        "error": rec.get("error"), "evidence": rec.get("evidence", [])[:3],
                        "precondition": rec.get("precondition")})

        run_specs(cells, spec, jobs, on_start, finished,
                  seconds_of=lambda cell: past_seconds(rdir(cell)),
                  key_of=lambda cell: (cell[0], cell[1].name))
    out: dict = {}
    for name in names:
        for tgt in columns:
            cell_runs = sorted(runs.get((name, tgt.name), []), key=lambda x: x["seed"])
            if cell_runs:
                out.setdefault(name, {})[tgt.name] = cell_of(cell_runs, tgt.expected(name))
    return out


def cell_of(runs: list[dict], expected: str | None) -> dict:
    """A cell of the table from its runs (one per seed): 'mixed' when the seeds disagree."""
    verdicts = {x["verdict"] for x in runs}
    return {"verdict": verdicts.pop() if len(verdicts) == 1 else "mixed",
            "seconds": round(sum(x["seconds"] for x in runs) / len(runs), 2),
            "report": runs[-1]["report"], "expected": expected, "runs": runs}


MATRIX_SCHEMA = "cnikit-matrix/1"


def write_matrix(root: Path, m: dict, columns: list[str], shard=None) -> Path:
    """matrix.json beside the runs' reports: what `cnikit report merge` joins."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "matrix.json"
    path.write_text(json.dumps({"schema": MATRIX_SCHEMA, "columns": columns,
                                "shard": f"{shard[0]}/{shard[1]}" if shard else None,
                                "cells": m}, indent=1, default=str) + "\n")
    return path


def matrix_ok(m: dict) -> bool:
    return all(c["expected"] is None or c["verdict"] == c["expected"]
               for row in m.values() for c in row.values())
