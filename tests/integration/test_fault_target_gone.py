"""A fault aimed at an interface that left EC2 before the fault was applied (the build freed
it between the draw and the act): skipped and recorded in the run's history, never an error
of the run. Real runs of the engine: namespaces, the reference daemon, moto behind the gate
and the fault IMDS; the interface is deleted through EC2 before the nemesis is asked, so
the race random chaos met under load is played every time."""

from __future__ import annotations

import os

import pytest

from cnikit.scenarios import random_chaos
from cnikit.scenarios.engine import Scenario, run_scenario

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces")]


def _freed_interface(ctx) -> tuple[str, str]:
    """An interface of the run's subnet, drawn as a target (its MAC read from EC2), then
    deleted through EC2 as a build's scale-down deletes an ENI."""
    ec2 = ctx.cloud.client()
    eni = ec2.create_network_interface(SubnetId=ctx.fabric.topo.subnet_id,
                                       Description="drawn, then freed")["NetworkInterface"]
    eni_id, mac = eni["NetworkInterfaceId"], eni["MacAddress"]
    # An IMDS answer is never behind EC2 (its fence): after one, the IMDS has seen the
    # interface, as it had seen every ENI random chaos draws from a node.
    ctx.imds_served(0, mac)
    ctx.step("a fault's target drawn", eni=eni_id, mac=mac)
    ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    ctx.step("its interface deleted through EC2", eni=eni_id)
    return eni_id, mac


def _chaos_meets_a_freed_interface(ctx) -> None:
    ctx.require_pod(0)
    _, mac = _freed_interface(ctx)
    ctx.step(random_chaos.imds_fault(ctx, "stale", {"mac": mac}, 2.0))
    ctx.require_pod(0)  # the run goes on after the skip


def _scenario_aims_at_a_freed_interface(ctx) -> None:
    ctx.require_pod(0)
    _, mac = _freed_interface(ctx)
    ctx.imds_fault("missing", target={"mac": mac}, duration=2.0)
    ctx.step("not reached: the fault could not be applied")


def _run(fn, tmp_path):
    sc = Scenario(fn.__name__.strip("_").replace("_", "-"), "a fault at a freed interface",
                  fn, nodes=1)
    return run_scenario(sc, "hardened", seed=52, report_dir=tmp_path / "report")


def _nemesis(r, f: str) -> list[dict]:
    return [e for e in r.history if e["process"] == "nemesis" and e["f"] == f]


def test_random_chaos_skips_a_fault_at_a_freed_interface_and_records_why(tmp_path):
    r = _run(_chaos_meets_a_freed_interface, tmp_path)
    assert r.error is None and r.verdict == "holds", (r.error, r.violations)
    eni_id = next(s["eni"] for s in r.steps if s["title"] == "a fault's target drawn")
    mac = next(s["mac"] for s in r.steps if s["title"] == "a fault's target drawn")
    [skipped] = _nemesis(r, "fault-skipped")
    v = skipped["value"]
    assert skipped["type"] == "info" and v["fault"] == "imds-fault" and v["kind"] == "stale"
    assert v["target"] == {"mac": mac}
    assert f"{eni_id} (mac {mac}) left EC2" in v["reason"]
    assert "DeleteNetworkInterface" in v["reason"]
    assert not _nemesis(r, "imds-fault")  # nothing injected, nothing failed
    # The schedule's line for the operation says it was skipped, and the run went on.
    titles = [s["title"] for s in r.steps]
    assert any(t.startswith(f"imds stale fault skipped: {eni_id}") for t in titles)
    assert len([e for e in r.history if e["process"] == "client" and e["type"] == "ok"
                and e["f"] == "pod-add"]) == 2
    assert "fault-skipped" in (tmp_path / "report" / "report.html").read_text()


def test_a_scenario_fault_at_a_freed_interface_ends_the_run_inconclusive(tmp_path):
    r = _run(_scenario_aims_at_a_freed_interface, tmp_path)
    eni_id = next(s["eni"] for s in r.steps if s["title"] == "a fault's target drawn")
    assert r.error is None and r.verdict == "inconclusive", (r.error, r.violations)
    assert r.precondition.startswith(f"imds missing fault skipped: {eni_id}")
    assert "not reached: the fault could not be applied" not in [s["title"] for s in r.steps]
    [skipped] = _nemesis(r, "fault-skipped")
    assert skipped["value"]["kind"] == "missing" and eni_id in skipped["value"]["reason"]
