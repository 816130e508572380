"""`cnikit up`: a live VPC kept until Ctrl-C, its URLs printed, its nemesis logged."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from cnikit.containers.options import runtime_option, runtime_params, runtime_used
from cnikit.fabric.cleanup import cleanup_on_signals
from cnikit.scenarios.cli.common import (
    _ec2_options,
    _profile_option,
    _progress,
    _quiet_logs,
    _target_option,
)
from faultcore.cli import wait_for_signal


def up_urls(ec2: str, imds: str, control: str) -> dict[str, str]:
    """Base URLs, as README's examples use them (`$CONTROL/faults`, `$GATE/faults`)."""
    from cnikit.cloud.gate import CONTROL as GATE_PATH

    ec2, control = ec2.rstrip("/"), control.rstrip("/")
    return {"EC2": ec2, "GATE": ec2 + GATE_PATH.rstrip("/"), "IMDS": imds.rstrip("/"),
            "CONTROL": control, "FAULT_IMDS_CONTROL": control}  # the last for `fault-imds`


def export_line(urls: dict[str, str]) -> str:
    return "export " + " ".join(f"{k}={v}" for k, v in urls.items())


def nemesis_line(entry: dict) -> str:
    """A nemesis entry as the terminal shows it when it happens: what was injected, on
    what, and for how long; a fault without a duration is said to last until removed, since
    that is the one a user forgets."""
    from cnikit.report.timeline import fmt, nemesis_fields

    v = entry["value"] if isinstance(entry.get("value"), dict) else {}
    clock = time.strftime("%H:%M:%S", time.localtime(entry["time"]))
    name = entry["f"] + (f" {v['id']}" if v.get("id") is not None else "")
    if entry["type"] == "end":
        return f"{clock} {name} ended ({v.get('by') or 'removed'})"
    if entry["type"] == "fail":
        return f"{clock} {name} failed: {v.get('error')}"
    fields = "".join(f" {k}={fmt(x)}" for k, x in nemesis_fields(v).items())
    line = f"{clock} {name}{fields}"
    if entry["type"] == "start":
        duration = v.get("duration")
        line += (f" for {duration:g}s" if isinstance(duration, (int, float))
                 else ", until removed (no duration)")
    return line


def log_nemesis(history, path: Path, echo: Callable[[str], None] | None = None) -> None:
    """Append every nemesis entry of the history to path as a JSON line, as it happens, and
    show it on `echo` (the terminal of `cnikit up`)."""
    from cnikit.check.history import NEMESIS

    path.parent.mkdir(parents=True, exist_ok=True)
    out = path.open("a", buffering=1)

    def write(entry: dict) -> None:
        if entry["process"] == NEMESIS:
            out.write(json.dumps(entry, default=str) + "\n")
            if echo is not None:
                echo(nemesis_line(entry))

    history.subscribe(write)

@click.command("up")
@runtime_option
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 20))
@click.option("--pods", default=4, show_default=True, type=click.IntRange(0, 500))
@click.option("--ip-family", type=click.Choice(["ipv4", "ipv6", "dual"]), default=None,
              help="the pods' address family: ipv6 is a dual-stack VPC with the daemon in "
                   "its IPv6 mode (default: the build's own, ipv4 for the built-ins)")
@_profile_option()
@_target_option()
@_ec2_options
def up_cmd(nodes, pods, ip_family, profile, target, ec2, ec2_endpoint) -> None:
    """A live VPC (nodes, daemons, the target's components, pods) kept until Ctrl-C. Every
    fault added over the control URLs is a nemesis operation, logged to
    reports/up/RUNID/nemesis.jsonl."""
    from cnikit.cluster.actions import Served
    from cnikit.runtime import require_root
    from cnikit.scenarios.engine import DEFAULT_SCALE, make_cluster
    from cnikit.targets import resolve_target

    _quiet_logs()
    tgt = resolve_target(target or profile)  # a bad target file fails here, before anything
    require_root("cnikit up")
    with cleanup_on_signals():
        cluster = make_cluster(nodes, tgt, DEFAULT_SCALE, {}, 1, ec2, ec2_endpoint,
                               ip_family=ip_family)
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
            log_nemesis(cluster.history, nemesis_log, echo=click.echo)
            follower = cluster.nemesis.follow()
            cluster.cloud.gate.serve_nemesis(Served(cluster.nemesis, nodes))
            click.echo(f"run id   {f.rid}")
            used = runtime_used(runtime_params(cluster.runtime))
            if used:
                click.echo(used)
            click.echo(f"EC2      {urls['EC2']}   (EC2 API; its faults: $GATE/faults)")
            click.echo(f"REGION   {region}   (the VPC's: sign EC2 calls for it; any "
                       f"credentials do)")
            click.echo(f"GATE     {urls['GATE']}")
            click.echo(f"IMDS     {urls['IMDS']}   (/latest/meta-data/...; with several "
                       f"nodes name one: ?instance=ID)")
            click.echo(f"CONTROL  {urls['CONTROL']}   (IMDS faults: $CONTROL/faults, "
                       "$CONTROL/events)")
            if f.ipv6:
                click.echo(f"IPv6     VPC {f.topo.vpc_ipv6_cidr}, subnet {f.topo.subnet_ipv6_cidr}; "
                           f"inside the VPC the IMDS is also at {f.imds_endpoint6}")
            click.echo(f"TARGET   {tgt.name} {tgt.version}")
            for n, node in enumerate(f.nodes):
                click.echo(f"node {n}  {node.instance_id}  netns {node.name}  "
                           f"daemon socket {cluster.daemons[n].socket_path}  "
                           f"log {cluster.daemons[n].log_path}")
            for name, comp in cluster.components.items():
                click.echo(f"component {name}  netns {f.vpc.name}  pid {comp.pid}  "
                           f"log {comp.log_path}   (kill-component, restart-component)")
            for p in f.pods.values():
                click.echo(f"  pod {p.name}  {p.ip}  on node {p.node.index}")
            click.echo(f"NEMESIS  {nemesis_log}   (every fault added over these URLs, "
                       "and the actions of $GATE/nemesis: kill, restart, crash-at, ...; "
                       "each also shown below as it happens)")
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
