"""Lingering flows on real namespaces (upstream 1091): a removed pod's peers keep sending to
its old IP for the cooldown; a pod given that IP within it answers them (`stale`), which the
checkers call an early reuse; after the cooldown the flows are gone and a reuse is fine."""

from __future__ import annotations

import pytest

from cnikit.check.prober import Prober, ProbeTarget
from cnikit.check.watch import Watch
from cnikit.fabric import ec2ops
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]


def target(pod) -> ProbeTarget:
    return ProbeTarget(pod.name, pod.path, pod.ip)


def two_nodes(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=2)
    [(ip_a, dev_a)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    [(ip_p, dev_p)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 1, 1)
    return fabric, fabric.add_pod(0, ip_a, dev_a), fabric.add_pod(1, ip_p, dev_p)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_removed_pods_flows_reach_the_next_holder_of_its_ip(make_fabric, fab_cloud, threads):
    fabric, a, peer = two_nodes(make_fabric, fab_cloud)
    events: list[dict] = []
    with Prober(events.append, threads=threads, linger=30.0) as prober:
        prober.add([target(a), target(peer)])
        wait_until(lambda: prober.last_stats.get("ok", 0) > 0, 3, what="probing")
        prober.remove([a.name])
        fabric.delete_pod(a)
        b = fabric.add_pod(0, a.ip, a.device_index)  # the same IP, a new pod
        prober.add([target(b)])
        [ev] = wait_until(lambda: [e for e in events if e["ev"] == "stale"][:1], 3,
                          what="a stale answer")
        assert (ev["src"], ev["dst"], ev["by"], ev["ip"]) == (peer.name, a.name, b.name, a.ip)
        assert 0 < ev["after"] < 30
        # Lingering flows are never failures, and the live mesh is unaffected.
        assert not [e for e in events if e["ev"] in ("fail", "wrong")]


def test_without_linger_a_removed_pod_is_forgotten(make_fabric, fab_cloud):
    fabric, a, peer = two_nodes(make_fabric, fab_cloud)
    events: list[dict] = []
    with Prober(events.append, linger=0.0) as prober:
        prober.add([target(a), target(peer)])
        prober.remove([a.name])
        fabric.delete_pod(a)
        b = fabric.add_pod(0, a.ip, a.device_index)
        prober.add([target(b)])
        n = len([e for e in events if e["ev"] == "stats"])
        wait_until(lambda: len([e for e in events if e["ev"] == "stats"]) >= n + 2, 4,
                   what="two more stats")
        assert not [e for e in events if e["ev"] == "stale"]
        assert prober.last_stats["ghost_sent"] == 0


def test_watch_reports_an_early_reuse_with_evidence(make_fabric, fab_cloud):
    fabric, a, peer = two_nodes(make_fabric, fab_cloud)
    with Watch(fabric, ip_cooldown=30.0) as watch:
        fabric.delete_pod(a)
        b = fabric.add_pod(0, a.ip, a.device_index)
        [v] = wait_until(lambda: watch.invariants.violations("early-reuse"), 3,
                         what="an early reuse")
        assert v.subject == b.name and v.detail["deleted_pod"] == a.name
        assert v.detail["ip"] == a.ip and v.detail["sent_from"] == peer.name
        assert v.detail["reassigned_after"] < 30 and "reached its successor" in v.detail["what"]


def test_watch_lets_a_reuse_after_the_cooldown_be(make_fabric, fab_cloud):
    fabric, a, peer = two_nodes(make_fabric, fab_cloud)
    with Watch(fabric, ip_cooldown=0.3) as watch:
        fabric.delete_pod(a)
        # The flows end with the cooldown: wait for the prober to drop them.
        wait_until(lambda: watch.prober.last_stats.get("ghosts") == 0
                   and watch.prober.last_stats.get("ghost_sent", 0) == 0, 4,
                   what="the lingering flow gone")
        fabric.add_pod(0, a.ip, a.device_index)
        stats = len([e for e in watch.history.entries() if e["f"] == "stats"])
        wait_until(lambda: len([e for e in watch.history.entries() if e["f"] == "stats"])
                   >= stats + 2, 4, what="two more stats")
        assert watch.invariants.violations() == []
        assert not [e for e in watch.history.entries() if e["f"] == "stale"]
