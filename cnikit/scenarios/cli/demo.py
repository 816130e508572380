"""`cnikit demo`: upstream 3019 replayed on a build that breaks and one that holds, with
the node's ENI as EC2, the IMDS and the daemon see it at each step."""

from __future__ import annotations

import ipaddress
import sys
import time
from pathlib import Path

import click

from cnikit.fabric.cleanup import cleanup_on_signals
from cnikit.report.outdir import writable_dir
from cnikit.scenarios.cli.common import _progress, _quiet_logs
from cnikit.scenarios.cli.run import _print_result
from faultcore.cli import seed_option

DEMO_SCENARIO = "imds-stale-equal-length"


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
@seed_option(default=1)
@click.option("--report", "report_root", default="reports/demo", show_default=True,
              type=click.Path(file_okay=False))
def demo_cmd(seed, report_root) -> None:
    """Replay upstream 3019 on vpc-cni-1.18.3 (must break) then hardened (must hold)."""
    from cnikit import scenarios
    from cnikit.runtime import require_root

    _quiet_logs()
    writable_dir(report_root)
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
