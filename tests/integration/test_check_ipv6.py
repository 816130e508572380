"""Acceptance: the prober and the invariants judge a dual-stack run, both families at once.

IPv4 and IPv6 pods on three nodes of a dual-stack VPC reach every pod of their own family
(never probed across families: there is no path between them) with no violation; EC2
moving an IPv6 pod's /80 to another node darkens exactly that pod and leaves its address
unowned by its node; a second pod given that address is a shared IP; moving the /80 back
clears it all.
"""

from __future__ import annotations

import ipaddress
import itertools
import json

import pytest

from cnikit.check.invariants import judge
from cnikit.check.watch import Watch
from cnikit.fabric import ec2ops
from cnikit.fabric.topology import Fabric
from cnikit.report import write_report
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]
_numbers = itertools.count(230)


def delegate(cloud, fabric, node: int) -> ipaddress.IPv6Network:
    """A /80 on the node's primary ENI, as the VPC CNI's IPv6 mode takes one."""
    eni = fabric.topo.instances[node].primary_eni_id
    got = cloud.client().assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1)
    return ipaddress.IPv6Network(got["AssignedIpv6Prefixes"][0])


def move_prefix(cloud, fabric, prefix: str, src: int, dst: int) -> None:
    ec2 = cloud.client()
    ec2.unassign_ipv6_addresses(NetworkInterfaceId=fabric.topo.instances[src].primary_eni_id,
                                Ipv6Prefixes=[prefix])
    ec2.assign_ipv6_addresses(NetworkInterfaceId=fabric.topo.instances[dst].primary_eni_id,
                              Ipv6Prefixes=[prefix])


@pytest.fixture
def dual_mesh(fab_cloud):
    """3 dual-stack nodes, each with two IPv4 pods and one or two IPv6 pods from its /80,
    watched. Yields (fabric, watch, {node: its /80})."""
    k = next(_numbers)
    topo = fab_cloud.bootstrap(nodes=3, vpc_cidr=f"10.{k}.0.0/16",
                               subnet_cidr=f"10.{k}.1.0/24", ipv6=True)
    fabric = Fabric(fab_cloud, topo).start()
    try:
        nets = {n: delegate(fab_cloud, fabric, n) for n in range(3)}
        for n in range(3):
            for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 2):
                fabric.add_pod(n, ip, dev)
        assert fabric.wait_synced(fab_cloud.gate.owners().version)
        for n, hosts in ((0, (5,)), (1, (5, 6)), (2, (5,))):
            for h in hosts:
                fabric.add_pod(n, str(nets[n][h]))
        with Watch(fabric) as watch:
            yield fabric, watch, nets
    finally:
        fabric.close()


def stats_ticks(watch, n: int) -> None:
    """Wait for n more of the prober's once-a-second reports."""
    def count() -> int:
        return len([e for e in watch.history.entries() if e["f"] == "stats"])

    seen = count()
    wait_until(lambda: count() >= seen + n, n + 3, 0.05, "prober stats")


def healthy_for(watch, seconds: int, pods: int = 10) -> None:
    """Every pod of both families probed, every probe answered, no violation."""
    stats_ticks(watch, seconds)
    assert watch.invariants.active() == [], watch.invariants.active()
    s = watch.prober.last_stats
    assert s["ok"] > 0 and s["stale_count"] == 0 and s["pods"] == pods, s


def test_both_families_judged_in_one_run(dual_mesh, fab_cloud, tmp_path):
    fabric, watch, nets = dual_mesh
    assert not watch.errors  # every pod's socket, and both anchors (@vpc, @vpc6), made
    v6 = [p for p in fabric.pods.values() if ":" in p.ip]
    v4 = [p for p in fabric.pods.values() if ":" not in p.ip]
    assert len(v6) == 4 and len(v4) == 6

    # (a) Everyone reaches its own family and the anchor of its family: nothing fails, no
    # pair across families is ever probed (it could only time out).
    healthy_for(watch, 2)
    entries = watch.history.entries()
    assert not [e for e in entries if e["f"] in ("fail", "wrong")]
    owned = [e for e in entries if e["f"] == "ownership"]
    assert str(nets[0]) in owned[0]["value"]["prefixes_set"]  # the /80s are EC2's truth too
    assert watch.invariants.ok()

    # (b) EC2 moves the /80 of node 0's IPv6 pod to node 2: that pod, and only it, goes
    # dark, and its address is held by node 2, not its own.
    lost = next(p for p in v6 if p.node.index == 0)
    move_prefix(fab_cloud, fabric, str(nets[0]), 0, 2)
    took = watch.wait_for(lambda inv: lost.name in inv.failing_pods(), 2.0)
    assert took is not None, "the IPv6 pod gone dark was not detected within 2 s"
    node2 = fabric.topo.instances[2].instance_id
    [v] = wait_until(lambda: watch.invariants.active("ip-not-owned"), 2.0,
                     what="ip-not-owned for the IPv6 pod")
    assert (v.subject, v.detail["ip"], v.detail["held_by"]) == (lost.name, lost.ip, node2)
    stats_ticks(watch, 1)  # every pair probed again: still only that pod
    assert watch.invariants.failing_pods() == {lost.name}

    # (c) A pod on node 2 given the same address: two pods hold one IPv6 address, and the
    # probes meant for the lost pod are answered by the twin.
    assert fabric.wait_synced(fab_cloud.gate.owners().version)
    twin = fabric.add_pod(2, lost.ip)
    [shared] = wait_until(lambda: watch.invariants.active("shared-ip"), 2.0, what="shared IP")
    assert shared.subject == lost.ip
    assert sorted(shared.detail["pods"]) == sorted([lost.name, twin.name])
    wait_until(lambda: [e for e in watch.history.entries() if e["f"] == "wrong"
                        and e["value"]["dst"] == lost.name and e["value"]["by"] == twin.name],
               2.0, what="a probe of the lost pod answered by its twin")

    # Restored: the twin gone, the /80 back on node 0.
    fabric.delete_pod(twin)
    move_prefix(fab_cloud, fabric, str(nets[0]), 2, 0)
    took = watch.wait_for(lambda inv: not inv.active(), 3.0)
    assert took is not None, watch.invariants.active()
    healthy_for(watch, 1)

    kinds = {v.kind for v in watch.invariants.violations()}
    assert kinds == {"unreachable", "ip-not-owned", "shared-ip"}
    assert {v.subject for v in watch.invariants.violations("unreachable")} == {lost.name}
    assert all(v.until is not None for v in watch.invariants.violations())
    # A replay of the saved history judges it the same.
    history = json.loads(json.dumps(watch.history.to_json()))
    assert [(v.kind, v.subject) for v in judge(history).violations()] == \
        [(v.kind, v.subject) for v in watch.invariants.violations()]
    verdict = json.loads((watch.dump(tmp_path / "report") / "verdict.json").read_text())
    assert verdict["ok"] is False
    # The run's report reads it: the lost IPv6 pod, by its address, in the summary.
    paths = write_report(tmp_path / "report", {
        "scenario": "dual-stack", "profile": None, "seed": 0, "verdict": "violation",
        "seconds": 1.0, "history": history, "imds_events": [], "audit": []})
    report = json.loads(paths["json"].read_text())
    assert lost.ip in json.dumps(report["summary"]) and paths["html"].stat().st_size > 0


def test_a_pod_is_probed_once_its_address_is_out_of_duplicate_address_detection(fab_cloud):
    # A plugin that leaves DAD on (the kernel's default in a new namespace) hands back a pod
    # whose address stays tentative for a second or two: it neither answers nor sends yet.
    # The kit waits that out (recorded as dad-wait) instead of reading the pod as dark.
    k = next(_numbers)
    topo = fab_cloud.bootstrap(nodes=2, vpc_cidr=f"10.{k}.0.0/16",
                               subnet_cidr=f"10.{k}.1.0/24", ipv6=True)
    fabric = Fabric(fab_cloud, topo).start()
    try:
        nets = {n: delegate(fab_cloud, fabric, n) for n in range(2)}
        assert fabric.wait_synced(fab_cloud.gate.owners().version)
        fabric.add_pod(1, str(nets[1][5]))

        def with_dad(event, pod):  # runs before the watch hears of the pod
            if event == "add":
                nl = pod.ns.nl
                eth0 = nl.link_index("eth0")
                nl.addr_del(eth0, pod.ip, 128)
                nl.addr_add(eth0, pod.ip, 128, dad=True)
                assert nl.tentative() == [pod.ip]

        with Watch(fabric) as watch:
            fabric.observers.insert(0, with_dad)
            pod = fabric.add_pod(0, str(nets[0][5]))
            healthy_for(watch, 2, pods=2)  # probed both ways and to the anchor
            entries = watch.history.entries()
            assert not [e["value"] for e in entries if e["f"] == "fail"]
            [waited] = [e["value"] for e in entries if e["f"] == "dad-wait"]
            assert waited["pod"] == pod.name and waited["tentative"] == [pod.ip]
    finally:
        fabric.close()

