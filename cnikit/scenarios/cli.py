"""`cnikit demo`, `cnikit scenarios`, `cnikit run`, `cnikit matrix`, `cnikit up`.

Exit codes: 0 every invariant held (or, for demo/matrix, every verdict as expected),
1 a violation (evidence printed; a build that makes no progress is one too: liveness),
2 bad usage or an unusable environment (one line). `cnikit run` on a scenario that could
not be set up against this build (no free address in the subnet, a race a busy machine lost
every time) prints INCONCLUSIVE with the unmet precondition and exits 0: nothing was
violated, but nothing was exercised either. A design feature the build lacks is no such
precondition: the run goes on and prints the branch it took (`adapted:`).
Progress goes to stderr; results to stdout.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import signal
import sys
import time
from pathlib import Path

import click

from cnikit.containers.options import runtime_option
from cnikit.errors import CnikitError, UsageError
from cnikit.fabric.cleanup import cleanup_on_signals
from cnikit.scenarios.parallel import default_jobs
from cnikit.targets import builtin_names
from faultcore.cli import wait_for_signal

DEMO_SCENARIO = "imds-stale-equal-length"


def _quiet_logs() -> None:
    # Servers running in this process log their retries; the run's story is the output.
    logging.getLogger().addHandler(logging.NullHandler())
    for name in ("fault_imds", "cnikit", "botocore", "urllib3", "aiohttp"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextlib.contextmanager
def _progress(label: str):
    """A spinner on stderr whose text follows the engine's progress messages."""
    from rich.markup import escape

    console = _console()
    if not console.is_terminal:
        yield lambda msg: console.print(msg, markup=False, style="dim")
        return
    with console.status(label) as status:
        yield lambda msg: status.update(escape(msg))


def _profile_option(default="hardened"):
    return click.option("--profile", "-p", default=default, show_default=True,
                        type=click.Choice(builtin_names()), help="daemon profile (a built-in target)")


def _target_option(multiple: bool = False):
    return click.option("--target", "-t", "targets" if multiple else "target", multiple=multiple,
                        default=None, metavar="FILE",
                        help="a target file (the build under test)"
                             + ("; repeatable, a column each" if multiple else "; instead of --profile"))


def _ec2_options(f):
    f = click.option("--ec2-endpoint", default=None,
                     help="URL of a running moto/LocalStack to put behind the gate")(f)
    f = click.option("--ec2", default="moto", show_default=True,
                     type=click.Choice(["moto", "localstack"]), help="EC2 upstream")(f)
    return f


# ---- cnikit scenarios ------------------------------------------------------------------

@click.command("scenarios")
@click.option("--verbose", "-v", is_flag=True, help="also the expected verdicts and why")
def scenarios_cmd(verbose: bool) -> None:
    """List the scenarios, one line each."""
    from cnikit import scenarios

    width = max(len(n) for n in scenarios.names())
    for name in scenarios.names():
        sc = scenarios.get(name)
        click.echo(f"{name:<{width}}  {sc.description}")
        if verbose:
            exp = ", ".join(f"{p}: {sc.expected.get(p) or 'not asserted'}" for p in builtin_names())
            click.echo(f"{'':<{width}}  expected {exp}")
            click.echo(f"{'':<{width}}  why: {sc.why}")


# ---- cnikit run ------------------------------------------------------------------------

def _print_result(r, out=None) -> None:
    echo = out or click.echo
    verdict = r.verdict.upper()
    exp = f" (expected {r.expected})" if r.expected else ""
    echo(f"{r.scenario} [{r.profile}] seed {r.seed}: {verdict}{exp} in {r.seconds:.1f}s")
    if r.error:
        echo(f"  scenario error: {r.error}")
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
    for f in exposure.get("faults") or []:
        echo(f"  exposure: {f['line']}")
    for a in exposure.get("adapted") or []:
        echo(f"  adapted: {a}")
    if r.report:
        echo(f"  report: {r.report.get('html') or r.report.get('json')}")


def default_report_dir(scenario: str, profile: str, seed: int) -> Path:
    return Path("reports") / scenario / f"{profile}-seed{seed}"


@click.command("run")
@runtime_option
@click.argument("scenario")
@_profile_option()
@_target_option()
@_ec2_options
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False),
              help="report directory [default: reports/SCENARIO/PROFILE-seedN]")
@click.option("--duration", default=None, type=float,
              help="seconds of chaos (random-chaos; others ignore it)")
def run_cmd(scenario, profile, target, ec2, ec2_endpoint, seed, report_dir, duration) -> None:
    """Run one scenario against one profile or target: exit 0 holds (or inconclusive: a
    precondition the build never met, printed), 1 violation (liveness too), 2 unusable."""
    from cnikit import scenarios
    from cnikit.targets import resolve_target

    _quiet_logs()
    sc = scenarios.get(scenario)
    tgt = resolve_target(target or profile)  # a bad target file fails here, before anything
    profile = tgt.name
    report_dir = report_dir or default_report_dir(sc.name, profile, seed)
    with cleanup_on_signals(), _progress(f"{scenario} [{profile}]") as say:
        r = scenarios.run_scenario(sc, target=tgt, seed=seed, ec2=ec2,
                                   ec2_endpoint=ec2_endpoint, report_dir=report_dir,
                                   duration=duration, progress=say)
    _print_result(r)
    if r.verdict == "error":
        raise CnikitError(f"{scenario}: could not complete: {r.error}")
    sys.exit(0 if r.verdict in ("holds", "inconclusive") else 1)


# ---- cnikit matrix -----------------------------------------------------------------------

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
    cells = take_shard([(name, tgt, seed) for name in names for tgt in columns
                        for seed in range(first_seed, first_seed + seeds)], shard)

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
                  seconds_of=lambda cell: past_seconds(rdir(cell)))
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
                cells.append("")
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
              help="runs at once, each in a worker process [default: three per core]")
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
    require_root("cnikit matrix")
    total = len(take_shard(list(range(len(names) * len(profiles) * seeds)), share))
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


# ---- cnikit demo -------------------------------------------------------------------------

def _octets(ips, subnet: str) -> list[str]:
    net = ipaddress.ip_network(subnet, strict=False) if subnet else None
    out = []
    for ip in sorted(ips, key=lambda s: ipaddress.ip_address(s)):
        if net is not None and ipaddress.ip_address(ip) in net:
            out.append("." + ip.rsplit(".", 1)[1])
        else:
            out.append(ip)
    return out


class DemoPrinter:
    """Prints, at each step of the replay, the node's ENI as EC2, IMDS and the daemon see it."""

    def __init__(self, echo=click.echo):
        self.echo = echo
        self.n = 0

    def __call__(self, ctx, title: str, focus: dict) -> None:
        self.n += 1
        eni_id, node, mac = focus.get("eni"), focus.get("node", 0), focus.get("mac")
        if not eni_id:
            self.echo(f"  {self.n:>2}. {title}")
            return
        eni = ctx.ec2_eni(eni_id)
        primary = eni.primary_ip
        subnet = ctx.fabric.topo.subnet_cidr
        ec2 = set(eni.ips) - {primary}
        imds_raw = ctx.imds_served(node, mac)
        imds = set(imds_raw or []) - {primary}
        # The daemon's datastore, from its [observe] introspection port (upstream's /v1/enis).
        view = ctx.daemon_view(node)
        daemon = {ip for ip in (view[0].get(eni_id, []) if view else []) if "/" not in ip}
        held = set(view[1]) if view else set()
        pods = {p.ip for p in ctx.pods.values() if p.node.index == node}

        def marked(ips):
            return " ".join(f"{o}{'*' if ip in pods else ''}"
                            for o, ip in zip(_octets(ips, subnet),
                                             sorted(ips, key=lambda s: ipaddress.ip_address(s)),
                                             strict=True))

        self.echo(f"  {self.n:>2}. +{ctx.elapsed():4.1f}s {title}")
        self.echo(f"      EC2     ({len(ec2):>2}) {marked(ec2)}")
        self.echo(f"      IMDS    ({len(imds):>2}) {marked(imds)}"
                  + ("" if imds_raw is not None else "  (ENI not served)"))
        self.echo(f"      daemon  ({len(daemon):>2}) {marked(daemon)}"
                  + ("" if view is not None else "  (no introspection port to read)"))
        notes = []
        if imds - ec2:
            notes.append(f"IMDS still lists {len(imds - ec2)} IP(s) EC2 released")
        if ec2 - imds:
            notes.append(f"IMDS misses {len(ec2 - imds)} IP(s) EC2 assigned")
        lost = pods - daemon - held if view is not None else set()
        if lost:
            notes.append(f"daemon dropped pod IP(s) {' '.join(_octets(lost, subnet))}")
        dark = pods - ec2
        if dark:
            notes.append(f"EC2 no longer assigns pod IP(s) {' '.join(_octets(dark, subnet))}")
        if len(daemon) == len(imds) and daemon != imds:
            notes.append("lengths equal, contents differ")
        if notes:
            self.echo("      -> " + "; ".join(notes))


@click.command("demo")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--report", "report_root", default="reports/demo", show_default=True,
              type=click.Path(file_okay=False))
def demo_cmd(seed, report_root) -> None:
    """Replay upstream 3019 on vpc-cni-1.18.3 (must break) then hardened (must hold)."""
    from cnikit import scenarios
    from cnikit.runtime import require_root

    _quiet_logs()
    require_root("cnikit demo")
    sc = scenarios.get(DEMO_SCENARIO)
    click.echo("cnikit demo: upstream issue 3019 (stale IMDS, equal lengths), replayed on a live VPC")
    click.echo("  views of node 0's ENI: secondary IPs as last octets, * = held by a running pod")
    ok = True
    t0 = time.monotonic()
    for profile, want in (("vpc-cni-1.18.3", "violation"), ("hardened", "holds")):
        click.echo(f"\n== {profile} (expected: {want})")
        with cleanup_on_signals(), _progress(f"demo [{profile}]") as say:
            r = scenarios.run_scenario(sc, profile=profile, seed=seed, on_step=DemoPrinter(),
                                       report_dir=Path(report_root) / profile, progress=say)
        _print_result(r)
        ok &= r.verdict == want
    click.echo(f"\ndemo {'as expected' if ok else 'NOT as expected'} "
               f"in {time.monotonic() - t0:.1f}s")
    sys.exit(0 if ok else 1)


# ---- cnikit up ---------------------------------------------------------------------------

def up_urls(ec2: str, imds: str, control: str) -> dict[str, str]:
    """Base URLs, as README's examples use them (`$CONTROL/faults`, `$GATE/faults`)."""
    from cnikit.cloud.gate import CONTROL as GATE_PATH

    ec2, control = ec2.rstrip("/"), control.rstrip("/")
    return {"EC2": ec2, "GATE": ec2 + GATE_PATH.rstrip("/"), "IMDS": imds.rstrip("/"),
            "CONTROL": control, "FAULT_IMDS_CONTROL": control}  # the last for `fault-imds`


def export_line(urls: dict[str, str]) -> str:
    return "export " + " ".join(f"{k}={v}" for k, v in urls.items())


def log_nemesis(history, path: Path) -> None:
    """Append every nemesis entry of the history to path as a JSON line, as it happens."""
    from cnikit.check.history import NEMESIS

    path.parent.mkdir(parents=True, exist_ok=True)
    out = path.open("a", buffering=1)

    def write(entry: dict) -> None:
        if entry["process"] == NEMESIS:
            out.write(json.dumps(entry, default=str) + "\n")

    history.subscribe(write)

@click.command("up")
@runtime_option
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 20))
@click.option("--pods", default=4, show_default=True, type=click.IntRange(0, 500))
@_profile_option()
@_ec2_options
def up_cmd(nodes, pods, profile, ec2, ec2_endpoint) -> None:
    """A live VPC (nodes, daemons, pods) kept until Ctrl-C. Every fault added over the
    control URLs is a nemesis operation, logged to reports/up/RUNID/nemesis.jsonl."""
    from cnikit.runtime import require_root
    from cnikit.scenarios.engine import DEFAULT_SCALE, make_cluster

    _quiet_logs()
    require_root("cnikit up")
    with cleanup_on_signals():
        cluster = make_cluster(nodes, profile, DEFAULT_SCALE, {}, 1, ec2, ec2_endpoint)
        follower = None
        try:
            with _progress("bringing the VPC up") as say:
                say(f"starting {nodes} node(s)")
                cluster.start()
                for i in range(pods):
                    say(f"pod {i + 1}/{pods}")
                    cluster.add_pod(i % nodes, f"pod-{i + 1}")
            f = cluster.fabric
            urls = up_urls(cluster.cloud.endpoint, cluster.imds.url, cluster.imds.control_url)
            region = cluster.cloud.region
            nemesis_log = Path("reports") / "up" / f.rid / "nemesis.jsonl"
            log_nemesis(cluster.history, nemesis_log)
            follower = cluster.nemesis.follow()
            click.echo(f"run id   {f.rid}")
            click.echo(f"EC2      {urls['EC2']}   (EC2 API; its faults: $GATE/faults)")
            click.echo(f"REGION   {region}   (the VPC's: sign EC2 calls for it; any "
                       f"credentials do)")
            click.echo(f"GATE     {urls['GATE']}")
            click.echo(f"IMDS     {urls['IMDS']}   (/latest/meta-data/...; with several "
                       f"nodes name one: ?instance=ID)")
            click.echo(f"CONTROL  {urls['CONTROL']}   (IMDS faults: $CONTROL/faults, "
                       "$CONTROL/events)")
            for n, node in enumerate(f.nodes):
                click.echo(f"node {n}  {node.instance_id}  netns {node.name}  "
                           f"daemon socket {cluster.daemons[n].socket_path}")
            for p in f.pods.values():
                click.echo(f"  pod {p.name}  {p.ip}  on node {p.node.index}")
            click.echo(f"NEMESIS  {nemesis_log}   (every fault added over these URLs)")
            # The AWS variables make a pasted `aws ec2 ...` or SDK call reach this VPC.
            click.echo(export_line({**urls, **cluster.cloud.client_env()}))
            click.echo("Ctrl-C tears everything down.")
            sys.stdout.flush()
            wait_for_signal((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
            click.echo("tearing down", err=True)
        except KeyboardInterrupt:  # during the set-up (cleanup_on_signals)
            click.echo("tearing down", err=True)
        finally:
            if follower is not None:
                follower.stop()
            cluster.close()


__all__ = ["demo_cmd", "matrix_cmd", "run_cmd", "scenarios_cmd", "up_cmd", "UsageError"]
