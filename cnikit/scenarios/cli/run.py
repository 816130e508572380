"""`cnikit run`: one scenario against one profile or target, and how a run's result prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cnikit.containers.options import runtime_option, runtime_used
from cnikit.errors import CnikitError
from cnikit.fabric.cleanup import cleanup_on_signals
from cnikit.report.outdir import writable_dir
from cnikit.scenarios.cli.common import (
    _ec2_options,
    _profile_option,
    _progress,
    _quiet_logs,
    _target_option,
)
from faultcore.cli import seed_option


def _print_result(r, out=None) -> None:
    from cnikit.check.cost import lines as cost_lines
    from cnikit.check.exposure import lines as exposure_lines
    from cnikit.report.words import time_scale_sentence

    echo = out or click.echo
    verdict = r.verdict.upper()
    exp = f" (expected {r.expected})" if r.expected else ""
    echo(f"{r.scenario} [{r.target or r.profile}] seed {r.seed}: {verdict}{exp} in {r.seconds:.1f}s")
    if r.error:
        echo(f"  scenario error: {r.error}")
    used = runtime_used(r.params or {})
    if used:
        echo(f"  {used}")
    slowed = time_scale_sentence((r.params or {}).get("scale"),
                                 getattr(r, "attempts", None) or [])
    if slowed and not getattr(r, "too_slow", None):
        echo(f"  {slowed}")
    if getattr(r, "too_slow", None):
        echo(f"  too slow: {r.too_slow}; its violations are not judged (run it again on a "
             "quieter machine, or with a larger CNIKIT_TIME_SCALE)")
    elif r.precondition:
        echo(f"  precondition not met: {r.precondition}")
    if r.verdict == "inconclusive" and not getattr(r, "too_slow", None):
        echo("  the scenario could not be set up against this build, so it did not exercise "
             "it: not a failure, not a pass")
    for line in r.evidence():
        echo(f"  {line}")
    exposure = getattr(r, "exposure", None) or {}
    if r.verdict == "holds" and not exposure.get("exposed", True):
        echo("  not exposed: none of the scenario's faults reached this build (a pass that "
             "tested nothing the scenario is for)")
    for line in exposure_lines(exposure) + cost_lines(getattr(r, "cost", None)):
        echo(f"  {line}")
    if r.report:
        echo(f"  report: {r.report.get('html') or r.report.get('json')}")


def result_json(r) -> dict:
    """What `cnikit run --json` prints: the run's record as matrix.json and certificates keep
    it, with its target, error and evidence lines, and the violations themselves."""
    from cnikit.scenarios.parallel import run_record

    return {**run_record(r, r.scenario, r.seed, Path.cwd()), "target": r.target or r.profile,
            "error": r.error, "evidence": r.evidence(), "violations": r.violations}


def _scenario_names(typed: str) -> list[str]:
    """What the shell completes a scenario from (`cnikit run imds-<TAB>`)."""
    from cnikit import scenarios

    return [n for n in scenarios.names() if n.startswith(typed)]


def default_report_dir(scenario: str, target: str, seed: int) -> Path:
    return Path("reports") / scenario / f"{target}-seed{seed}"


@click.command("run")
@runtime_option
@click.argument("scenario", shell_complete=lambda _ctx, _param, typed: _scenario_names(typed))
@_profile_option()
@_target_option()
@_ec2_options
@seed_option(default=1)
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False),
              help="report directory [default: reports/SCENARIO/PROFILE-seedN]")
@click.option("--duration", default=None, type=float,
              help="seconds of chaos (random-chaos; others ignore it)")
@click.option("--json", "as_json", is_flag=True,
              help="print the result as one JSON object (progress stays on stderr)")
def run_cmd(scenario, profile, target, ec2, ec2_endpoint, seed, report_dir, duration,
            as_json) -> None:
    """Run one scenario against one profile or target: exit 0 holds (or inconclusive: a
    precondition the build never met, printed), 1 violation (liveness too), 2 unusable."""
    from cnikit import scenarios
    from cnikit.targets import resolve_target

    _quiet_logs()
    sc = scenarios.get(scenario)
    tgt = resolve_target(target or profile)  # a bad target file fails here, before anything
    report_dir = writable_dir(report_dir or default_report_dir(sc.name, tgt.name, seed))
    with cleanup_on_signals(), _progress(f"{scenario} [{tgt.name}]") as say:
        r = scenarios.run_scenario(sc, target=tgt, seed=seed, ec2=ec2,
                                   ec2_endpoint=ec2_endpoint, report_dir=report_dir,
                                   duration=duration, progress=say)
    if as_json:
        click.echo(json.dumps(result_json(r), indent=1, default=str))
    else:
        _print_result(r)
    if r.verdict == "error":
        raise CnikitError(f"{scenario}: could not complete: {r.error}")
    sys.exit(0 if r.verdict in ("holds", "inconclusive") else 1)
