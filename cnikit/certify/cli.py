"""`cnikit certify TARGET`: exit 0 certified, 1 a violation (with evidence), 2 a bad target
file, an unusable machine or a run the kit could not complete (one line), 3 too few runs
exercised the build to certify it (docs/certify.md, "The overall verdict")."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import click

from cnikit.certify.suite import DEFAULT_SEEDS, EXERCISED_BAR
from cnikit.check.exposure import label
from cnikit.containers.options import runtime_option, runtime_params, runtime_used
from cnikit.errors import CnikitError, UsageError
from cnikit.report.outdir import writable_dir
from cnikit.report.words import time_scale_sentence
from cnikit.scenarios.parallel import PER_CORE, default_jobs


@click.command("certify")
@runtime_option
@click.argument("target", required=False)
@click.option("--seeds", default=DEFAULT_SEEDS, show_default=True, type=click.IntRange(1, 1000),
              help="random-chaos seeds (every other scenario runs once)")
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False),
              help="where certificate.json, report.html and the runs' reports go "
                   "[default: reports/certify/TARGET-NAME]")
@click.option("--junitxml", default=None, type=click.Path(dir_okay=False),
              help="also write the JUnit XML here (it is always in the report directory)")
@click.option("--scenario", "-s", "only", multiple=True, help="only these scenarios")
@click.option("--jobs", "-j", default=default_jobs, type=click.IntRange(1, 64),
              help="at most this many runs at once, each in a worker process, as many as "
                   f"the CPU has room for [default: {PER_CORE} per core]")
@click.option("--shard", default=None, metavar="I/N",
              help="only the I-th of N deterministic shares of the runs "
                   "(join the shards with 'cnikit report merge')")
@click.option("--init", "init_file", default=None, type=click.Path(dir_okay=False),
              help="write a commented target file for the reference daemon, then exit")
def certify_cmd(target, seeds, report_dir, junitxml, only, jobs, shard, init_file) -> None:
    """Certify a CNI build (a target file, or a built-in profile) against every scenario.

    \b
    Exit codes:
      0  CERTIFIED: no violation, at least 90% of the runs exercised the build and at
         least one run's faults reached it
      1  FAILED: an invariant was violated (evidence printed)
      2  a bad target file, an unusable machine, or a run the kit could not complete
      3  INSUFFICIENT: no violation, but too few runs exercised the build"""
    from cnikit.fabric.cleanup import cleanup_on_signals
    from cnikit.scenarios.cli.common import _console, _progress, _quiet_logs

    if init_file:
        from cnikit.certify import template

        path = template.write(init_file)
        click.echo(f"wrote {path}; certify it with: cnikit certify {path}")
        return
    if not target:
        raise UsageError("certify needs a TARGET (a target file or a built-in profile); "
                         "'cnikit certify --init FILE' writes one")
    from cnikit.certify import certify
    from cnikit.runtime import require_root
    from cnikit.scenarios.parallel import parse_shard
    from cnikit.targets import resolve_target

    _quiet_logs()
    share = parse_shard(shard)
    t = resolve_target(target)  # a bad target file fails here, before anything starts
    root = writable_dir(Path(report_dir) if report_dir else Path("reports") / "certify" / t.name)
    if junitxml:
        writable_dir(Path(junitxml).parent, "the JUnit XML")
    require_root("cnikit certify")
    console = _console()

    in_flight: set[str] = set()

    def on_start(p) -> None:
        in_flight.add(p.key)
        if jobs > 1:
            console.print(f"started {p.scenario} seed {p.seed} ({len(in_flight)} in flight)",
                          markup=False, style="dim")

    def on_result(rec: dict, k: int, n: int) -> None:
        in_flight.discard(f"{rec['scenario']}-seed{rec['seed']}")
        extra = f" ({rec['precondition']})" if rec.get("precondition") else ""
        flight = f", {len(in_flight)} in flight" if jobs > 1 else ""
        console.print(f"[{k}/{n}{flight}] {rec['scenario']} seed {rec['seed']}: {rec['verdict']}"
                      f"{extra} {rec['seconds']:.1f}s", markup=False)

    t0 = time.monotonic()
    with cleanup_on_signals(), _progress(f"certify {t.name}") as say:
        cert = certify(t, seeds=seeds, report_dir=root, only=list(only) or None,
                       progress=say if jobs == 1 else None, on_result=on_result,
                       on_start=on_start, jobs=jobs, shard=share)
    if junitxml:
        shutil.copyfile(cert.paths["junit"], junitxml)
    doc = cert.document
    s = doc["summary"]
    click.echo(f"{t.name} {t.version}: {cert.verdict.upper()} - {s['runs']} runs: "
               f"{s['holds']} held ({s['not_exposed']} of them not exposed to their faults), "
               f"{s['violation']} violated, {s['inconclusive']} inconclusive, "
               f"{s['error']} could not complete; {s['exercised']} exercised the build, "
               f"{s['exposed']} exposed ({time.monotonic() - t0:.0f}s)")
    used = runtime_used(runtime_params(cert.runtime))
    if used:
        click.echo(used)
    for r in cert.runs:
        shown = label(r["verdict"], r.get("exposure"))
        slowed = time_scale_sentence(r.get("scale"), r.get("attempts") or [])
        if slowed and r["verdict"] != "inconclusive":
            click.echo(f"  {r['scenario']} seed {r['seed']}: {slowed}")
        if shown == "exposed":
            continue
        if r["verdict"] == "violation":  # the evidence, never a precondition met before it
            click.echo(f"  {r['scenario']} seed {r['seed']}: violation")
            for line in r.get("evidence") or []:
                click.echo(f"    {line}")
            continue
        why = (r.get("precondition") if r["verdict"] == "inconclusive" else
               r.get("error") if r["verdict"] == "error" else
               "; ".join(f["line"] for f in (r.get("exposure") or {}).get("faults") or []))
        click.echo(f"  {r['scenario']} seed {r['seed']}: {shown}" + (f": {why}" if why else ""))
    wasteful = [r for r in cert.runs if r.get("cost")]
    if wasteful:  # not part of the verdict: what the build's EC2 calls wasted
        click.echo(f"cost (not part of the verdict): {len(wasteful)} run(s) wasted EC2 calls "
                   "or ENIs")
        for r in wasteful:
            for f in r["cost"]:
                click.echo(f"  {r['scenario']} seed {r['seed']}: {f['kind']}: {f['what']}")
    click.echo(f"certificate: {cert.paths['certificate']}")
    click.echo(f"report: {cert.paths['html']}")
    if cert.verdict == "insufficient" and cert.too_slow:
        click.echo(f"insufficient: this machine was too slow for the time scale in "
                   f"{len(cert.too_slow)} run(s) ("
                   + ", ".join(f"{r['scenario']} seed {r['seed']}" for r in cert.too_slow)
                   + "); certify on a quieter machine (fewer --jobs, nothing else running)")
    elif cert.verdict == "insufficient":
        click.echo(f"insufficient: {s['exercised']} of {s['runs']} runs exercised the build "
                   f"(at least {EXERCISED_BAR:.0%} must) and {s['exposed']} exposed it to their "
                   f"faults (at least one must)")
    if cert.verdict == "incomplete":
        first = next(r for r in cert.runs if r["verdict"] == "error")
        raise CnikitError(f"{first['scenario']} seed {first['seed']} could not complete: "
                          f"{first.get('error')}")
    sys.exit(cert.exit_code)
