"""`cnikit matrix`: the command and its table (the running is cnikit.scenarios.matrix)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from cnikit.fabric.cleanup import cleanup_on_signals
from cnikit.report.outdir import writable_dir
from cnikit.scenarios.cli.common import _console, _progress, _quiet_logs, _target_option
from cnikit.scenarios.matrix import matrix_cells, matrix_ok, run_matrix, write_matrix
from cnikit.scenarios.parallel import PER_CORE, default_jobs
from cnikit.targets import builtin_names


def _table(m: dict, profiles: list[str]):
    from rich.table import Table

    t = Table(title="cnikit matrix")
    t.add_column("scenario")
    for p in profiles:
        t.add_column(p)
    for name, row in m.items():
        cells = []
        for p in profiles:
            c = row.get(p)
            if c is None:
                cells.append("n/a")  # another address family: not run
                continue
            cells.append(matrix_cell(c))
        t.add_row(name, *cells)
    return t


def matrix_cell(c: dict) -> str:
    """A cell's verdict and whether the scenario expected it of that profile: a violation
    is the expected verdict where the profile has the bug the scenario replays."""
    verdict, expected = c["verdict"], c["expected"]
    if expected is None:
        note, style = "not asserted", "yellow"
    elif verdict == expected:
        note, style = "expected", "green"
    else:
        note, style = f"UNEXPECTED, expected {expected}", "bold red"
    return f"[{style}]{verdict} ({note})[/{style}] {c['seconds']:.0f}s"


@click.command("matrix")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--seeds", default=1, show_default=True, type=click.IntRange(1, 100),
              help="seeds per cell (1..N); a cell is 'mixed' when they disagree")
@click.option("--scenario", "-s", "only", multiple=True, help="only these scenarios")
@click.option("--profile", "-p", "profiles", multiple=True, type=click.Choice(builtin_names()),
              help="only these profiles")
@_target_option(multiple=True)
@click.option("--report", "report_root", default="reports/matrix", show_default=True,
              type=click.Path(file_okay=False))
@click.option("--jobs", "-j", default=default_jobs, type=click.IntRange(1, 64),
              help="at most this many runs at once, each in a worker process, as many as "
                   f"the CPU has room for [default: {PER_CORE} per core]")
@click.option("--shard", default=None, metavar="I/N",
              help="only the I-th of N deterministic shares of scenario x target x seed "
                   "(join the shards with 'cnikit report merge')")
def matrix_cmd(as_json, seeds, only, profiles, targets, report_root, jobs, shard) -> None:
    """Every scenario against every profile (and target file): exit 0 when every verdict is
    as expected."""
    from cnikit import scenarios
    from cnikit.targets import resolve_target

    _quiet_logs()
    names = list(only) or scenarios.names()
    for n in names:
        scenarios.get(n)
    files = [resolve_target(t) for t in targets]  # a bad file fails before anything starts
    profiles = list(profiles) or ([] if files else builtin_names())
    columns = [resolve_target(p) for p in profiles] + files
    profiles = [t.name for t in columns]
    from cnikit.runtime import require_root
    from cnikit.scenarios.parallel import parse_shard, take_shard

    share = parse_shard(shard)
    writable_dir(report_root)
    require_root("cnikit matrix")
    total = len(take_shard(matrix_cells(names, columns, seeds), share))
    console = _console()
    done, flying = [0], set()

    def on_start(cell):
        flying.add((cell[0], cell[1].name, cell[2]))
        if jobs > 1:
            console.print(f"started {cell[0]} [{cell[1].name}] seed {cell[2]} "
                          f"({len(flying)} in flight)", markup=False, style="dim")

    def on_result(cell, run):
        flying.discard((cell[0], cell[1].name, cell[2]))
        done[0] += 1
        expected = cell[1].expected(cell[0])
        ok = "" if expected in (None, run["verdict"]) else f" (expected {expected})"
        flight = f", {len(flying)} in flight" if jobs > 1 else ""
        console.print(f"[{done[0]}/{total}{flight}] {cell[0]} [{cell[1].name}] seed {cell[2]}: "
                      f"{run['verdict']}{ok} {run['seconds']:.1f}s", markup=False)

    t0 = time.monotonic()
    with cleanup_on_signals(), _progress("matrix") as say:
        m = run_matrix(names, columns, seeds, report_root=Path(report_root),
                       progress=say if jobs == 1 else None, on_result=on_result,
                       on_start=on_start, jobs=jobs, shard=share)
    write_matrix(Path(report_root), m, [t.name for t in columns], share)
    if as_json:
        click.echo(json.dumps(m, indent=1))
    else:
        from rich.console import Console

        Console().print(_table(m, profiles))
        click.echo(f"{total} runs in {time.monotonic() - t0:.0f}s; reports under {report_root}")
    sys.exit(0 if matrix_ok(m) else 1)
