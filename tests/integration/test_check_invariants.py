"""Acceptance: the prober and the invariants over a real fabric.

Pods across three nodes reach each other; unassigning one pod's IP in EC2 makes exactly
that pod fail within a second; giving the IP to another node's ENI and wiring a pod there
with it is a shared IP; restoring ownership clears the failure.
"""

from __future__ import annotations

import json

import pytest

from cnikit.check.invariants import judge
from cnikit.check.watch import Watch
from cnikit.cluster.nemesis import Nemesis
from cnikit.fabric import ec2ops
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]


@pytest.fixture
def mesh(make_fabric, fab_cloud):
    """3 nodes x 2 pods wired directly, watched."""
    fabric = make_fabric(nodes=3)
    for n in range(3):
        for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 2):
            fabric.add_pod(n, ip, dev)
    with Watch(fabric) as watch:
        yield fabric, watch


def stats_ticks(watch, n: int) -> None:
    """Wait for n more of the prober's once-a-second reports."""
    seen = len([e for e in watch.history.entries() if e["f"] == "stats"])
    wait_until(lambda: len([e for e in watch.history.entries() if e["f"] == "stats"])
               >= seen + n, n + 3, 0.05, "prober stats")


def healthy_for(watch, seconds: int) -> None:
    """Every pod probed, no violation, for a while (each pod is probed ~10 times a second)."""
    stats_ticks(watch, seconds)
    assert watch.invariants.active() == [], watch.invariants.active()
    assert watch.prober.last_stats["ok"] > 0 and watch.prober.last_stats["stale_count"] == 0


def test_lost_ip_then_shared_ip_then_restored(mesh, fab_cloud, tmp_path):
    fabric, watch = mesh
    assert not watch.errors
    healthy_for(watch, 1)
    assert watch.invariants.ok()

    victim = fabric.pods[f"ck-{fabric.rid}-n0-p1"]
    eni0 = fabric.topo.instances[0].primary_eni_id
    eni1 = fabric.topo.instances[1].primary_eni_id

    nemesis = Nemesis(watch.history, cloud=fab_cloud)

    # 1. EC2 takes the IP back: exactly that pod fails, within a second.
    assert nemesis.unassign(victim.ip) == eni0
    took = watch.wait_for(lambda inv: victim.name in inv.failing_pods(), 1.0)
    assert took is not None, "the lost pod was not detected within 1 s"
    print(f"lost pod detected in {took * 1000:.0f} ms")
    assert watch.invariants.failing_pods() == {victim.name}
    stats_ticks(watch, 1)  # every pair probed again: still only that pod
    assert watch.invariants.failing_pods() == {victim.name}
    owned = watch.invariants.active("ip-not-owned")
    assert [v.subject for v in owned] == [victim.name] and owned[0].detail["held_by"] is None

    # 2. The IP goes to node 1 and a pod there gets it: a shared IP.
    nemesis.assign(victim.ip, eni1)
    fabric.wait_synced(fab_cloud.gate.owners().version)
    twin = fabric.add_pod(1, victim.ip)
    shared = wait_until(lambda: watch.invariants.active("shared-ip"), 1.0, what="shared IP")
    assert shared[0].subject == victim.ip
    assert sorted(shared[0].detail["pods"]) == sorted([victim.name, twin.name])
    # The probes show it too: someone probing one of them got the other's answer.
    wait_until(lambda: any(e["f"] == "wrong" for e in watch.history.entries()), 1.0,
               what="a probe answered by the wrong pod")

    # 3. Ownership restored: the failure clears.
    fabric.delete_pod(twin)
    nemesis.reassign(victim.ip, eni0)
    took = watch.wait_for(lambda inv: not inv.active(), 2.0)
    assert took is not None, watch.invariants.active()
    healthy_for(watch, 1)

    # The run is judged a failure, with the evidence kept, and a replay agrees.
    faults = [e for e in watch.history.entries() if e["process"] == "nemesis"]
    assert [(e["type"], e["f"]) for e in faults] == [
        ("info", "ec2-unassign"), ("info", "ec2-assign"), ("info", "ec2-assign")]
    assert [e["value"]["target"] for e in faults] == [
        {"eni": eni0, "ips": [victim.ip]}, {"eni": eni1, "ips": [victim.ip], "from": None},
        {"eni": eni0, "ips": [victim.ip], "from": eni1}]
    kinds = {v.kind for v in watch.invariants.violations()}
    assert kinds == {"unreachable", "ip-not-owned", "shared-ip"}
    assert {v.subject for v in watch.invariants.violations("unreachable")} == {victim.name}
    assert all(v.until is not None for v in watch.invariants.violations())
    history = json.loads(json.dumps(watch.history.to_json()))
    replay = judge(history)
    assert [(v.kind, v.subject) for v in replay.violations()] == \
        [(v.kind, v.subject) for v in watch.invariants.violations()]
    out = watch.dump(tmp_path / "report")
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["ok"] is False and len(verdict["violations"]) == len(watch.invariants.violations())
    assert len((out / "history.jsonl").read_text().splitlines()) >= len(history)  # it grows


@pytest.mark.parametrize("strict", [False, True])
def test_an_ip_unknown_to_the_build_is_a_leak_warning_not_a_violation(make_fabric, fab_cloud,
                                                                       strict):
    """EC2 does not say who put an address there: even certifying, a warning."""
    fabric = make_fabric(nodes=2)
    [(ip, dev)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    fabric.add_pod(0, ip, dev)
    # The build's view of its pool (the [observe] port): it knows nothing.
    with Watch(fabric, leak_grace=0.3, daemon_view=lambda iid: set(),
               strict_leaks=strict) as watch:
        watch.monitor.daemon_interval = 0.1
        [(spare, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 1, 1)  # nobody uses it
        wait_until(lambda: [w for w in watch.invariants.warnings("leak")
                            if w.subject == spare], 3.0, what="a leak warning")
        assert {w.detail["why"] for w in watch.invariants.warnings("leak")} == {"unknown"}
        assert watch.invariants.ok()


def test_an_ip_held_for_a_deleted_pod_is_a_violation_when_certifying(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=1)
    [(ip, dev)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    pod = fabric.add_pod(0, ip, dev)
    view = {"ips": [ip], "assigned": {ip: pod.name}}  # the build never frees it
    with Watch(fabric, leak_grace=0.3, strict_leaks=True) as watch:
        h = watch.history
        h.info("monitor", "daemon-view", {"instance_id": fabric.nodes[0].instance_id, **view})
        fabric.delete_pod(pod)
        # Asked for again after the delete (a view from before it cannot show the delete).
        h.info("monitor", "daemon-view", {"instance_id": fabric.nodes[0].instance_id, **view})
        [v] = wait_until(lambda: watch.invariants.violations("leak"), 3.0, what="a leak")
        assert (v.subject, v.detail["why"], v.detail["container"]) == (
            ip, "assigned-to-deleted", pod.name)


def test_daemon_view_makes_an_ip_known(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=1)
    known: set[str] = set()
    with Watch(fabric, leak_grace=0.3, daemon_view=lambda iid: known) as watch:
        watch.monitor.daemon_interval = 0.1
        ips = [ip for ip, _ in ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 2)]
        known.add(ips[0])
        wait_until(lambda: watch.invariants.warnings("leak"), 3.0, what="a leak warning")
        assert [w.subject for w in watch.invariants.warnings("leak")] == [ips[1]]


def test_a_node_losing_all_its_pods_blames_them_not_the_fewer_healthy_ones(make_fabric,
                                                                          fab_cloud):
    # Node 0 holds three pods, node 1 two. EC2 takes back all three of node 0's IPs: every
    # cross-node pair fails, and the two healthy pods would explain that with fewer pods.
    fabric = make_fabric(nodes=2)
    lost = [fabric.add_pod(0, ip, dev) for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 3)]
    for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, 1, 2):
        fabric.add_pod(1, ip, dev)
    with Watch(fabric) as watch:
        healthy_for(watch, 1)
        nemesis = Nemesis(watch.history, cloud=fab_cloud)
        for pod in lost:
            nemesis.unassign(pod.ip)
        want = {p.name for p in lost}
        wait_until(lambda: watch.invariants.failing_pods() == want, 2.0, 0.02,
                   "the three lost pods blamed")
        stats_ticks(watch, 1)
        assert watch.invariants.failing_pods() == want
