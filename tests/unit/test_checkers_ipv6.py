"""The checkers judge IPv6 pods as they judge IPv4 ones: an address inside a /80 its node
holds is owned, outside every address and prefix of its node it is not; two spellings of one
address are one address (shared IP, early reuse, a repeated ADD, the build's view); the
monitor records a dual-stack VPC's IPv6 addresses and /80s from a real gate in the same
ownership entries as IPv4's; reports shorten an IPv6 address to its last 64 bits."""

from __future__ import annotations

import itertools

from cnikit.check.history import History
from cnikit.check.invariants import Invariants
from cnikit.check.monitor import Monitor
from cnikit.report.words import short, shorts
from tests.waiting import wait_for

T0 = 1000.0
NET = "2600:1f14:0:1:2::/80"  # node i-1's /80
A = "2600:1f14:0:1:2::5"
A_LONG = "2600:1F14:0000:0001:0002:0000:0000:0005"  # A as a build may spell it
_numbers = itertools.count(240)


def live(**kw) -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=5, **kw)
    h.subscribe(inv.step)
    return h, inv


def add(h: History, pod: str, instance: str, ip: str, at: float = T0) -> None:
    h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": instance,
                                         "ip": ip}, at=at)


def test_an_ipv6_pod_is_owned_inside_its_nodes_80_and_not_outside_it():
    h, inv = live()
    h.info("monitor", "ownership", {"full": True,
                                    "set": {"2600:1f14:0:1::10": ["i-1", "eni-1", True]},
                                    "prefixes_set": {NET: ["i-1", "eni-1"],
                                                     "10.0.1.16/28": ["i-2", "eni-2"]}})
    add(h, "a", "i-1", A)
    add(h, "b", "i-2", "2600:1f14:0:1:2::6")  # in i-1's /80
    add(h, "c", "i-1", "2600:1f14:0:1:3::5")  # in no prefix at all
    add(h, "d", "i-2", "10.0.1.17")  # IPv4 beside it, in i-2's /28
    got = {v.subject: v.detail["held_by"] for v in inv.active("ip-not-owned")}
    assert got == {"b": "i-1", "c": None}
    # EC2 moves the /80 to i-2 (the monitor records a new owner as a set).
    h.info("monitor", "ownership", {"prefixes_set": {NET: ["i-2", "eni-2"]}})
    got = {v.subject: v.detail["held_by"] for v in inv.active("ip-not-owned")}
    assert got == {"a": "i-2", "c": None}


def test_two_spellings_of_one_ipv6_address_are_one_shared_address():
    h, inv = live()
    add(h, "x", "i-1", A)
    add(h, "y", "i-2", A_LONG)
    [v] = inv.active("shared-ip")
    assert v.subject == A and v.detail["pods"] == ["x", "y"]
    h.append("client", "ok", "pod-delete", {"pod": "y"})
    assert inv.active("shared-ip") == []
    h.info("prober", "wrong", {"src": "x", "dst": "x", "by": "z"})
    [v] = inv.active("shared-ip")
    assert v.subject == A and v.detail["answered_by"] == ["z"]


def test_an_ipv6_address_reused_early_is_caught_whatever_its_spelling():
    h, inv = live(ip_cooldown=1.5)
    add(h, "peer", "i-1", "2600:1f14:0:1:2::4", T0 - 10)
    add(h, "old", "i-1", A, T0 - 10)
    h.append("client", "ok", "pod-delete", {"pod": "old", "ip": A}, at=T0)
    add(h, "new", "i-1", A_LONG, T0 + 0.4)
    h.info("prober", "stale", {"src": "peer", "dst": "old", "by": "new", "ip": A,
                               "after": 0.5}, at=T0 + 0.5)
    [v] = inv.violations("early-reuse")
    assert (v.subject, v.detail["deleted_pod"], v.detail["ip"]) == ("new", "old", A)


def test_a_repeated_add_answering_the_same_ipv6_address_otherwise_spelled_holds():
    h, inv = live()
    retry = {"op": "add-repeat", "pod": "p", "ip": A, "answer": A_LONG}
    h.append("client", "ok", "cni-retry", retry)
    assert inv.violations("runtime-retry") == []
    h.append("client", "ok", "cni-retry", {**retry, "answer": "2600:1f14:0:1:2::9"})
    [v] = inv.violations("runtime-retry")
    assert v.detail["answer"] == "2600:1f14:0:1:2::9"


def test_ipv6_leaks_skip_the_enis_own_address_and_read_the_builds_view_by_address():
    h, inv = live()
    own, warm, lost = "2600:1f14:0:1::10", "2600:1f14:0:1::11", "2600:1f14:0:1::12"
    h.info("monitor", "ownership", {"full": True, "set": {
        own: ["i-1", "eni-1", True], warm: ["i-1", "eni-1", False],
        lost: ["i-1", "eni-1", False]}}, at=T0)
    h.info("monitor", "daemon-view", {"instance_id": "i-1", "ips": ["2600:1f14:0:1:0:0:0:11"]},
           at=T0 + 1)
    h.info("prober", "stats", {"stale": []}, at=T0 + 7)
    assert [w.subject for w in inv.warnings("leak")] == [lost]


def test_the_monitor_records_ipv6_addresses_and_80s_beside_ipv4(gate_cloud):
    n = next(_numbers)
    topo = gate_cloud.bootstrap(nodes=2, vpc_cidr=f"10.{n}.0.0/16",
                                subnet_cidr=f"10.{n}.1.0/24", ipv6=True)
    ec2 = gate_cloud.client()
    node, eni = topo.instances[0], topo.instances[0].primary_eni_id
    h = History()
    mon = Monitor(gate_cloud.gate, h, [i.instance_id for i in topo.instances]).start()
    try:
        [first] = [e["value"] for e in h.entries() if e["f"] == "ownership"]
        assert first["full"]
        assert first["set"][node.primary_ipv6] == [node.instance_id, eni, True]
        assert first["set"][node.primary_ip] == [node.instance_id, eni, True]
        got = ec2.assign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6PrefixCount=1,
                                        Ipv6AddressCount=1)
        [prefix], [extra] = got["AssignedIpv6Prefixes"], got["AssignedIpv6Addresses"]

        def changes() -> list[dict]:
            return [e["value"] for e in h.entries() if e["f"] == "ownership"][1:]

        wait_for(lambda: any(prefix in c["prefixes_set"] for c in changes()), 10,
                 "the /80 recorded")
        assert any(c["set"].get(extra) == [node.instance_id, eni, False] for c in changes())
        ec2.unassign_ipv6_addresses(NetworkInterfaceId=eni, Ipv6Prefixes=[prefix],
                                    Ipv6Addresses=[extra])
        wait_for(lambda: any(prefix in c["prefixes_unset"] and extra in c["unset"]
                             for c in changes()), 10, "the /80 and the address gone")
    finally:
        mon.stop()


def test_reports_shorten_an_ipv6_address_to_its_last_64_bits():
    assert short("2600:1f14:0:1:1234::5") == "::1234:0:0:5"
    assert short("2600:1f14:0:1:1234::/80") == "::1234:0:0:0/80"
    assert short("10.0.1.7") == ".7" and short("10.0.1.16/28") == ".16/28"
    assert shorts(["2600:1f14:0:1::9", "10.0.1.9", "10.0.1.7"]) == ".7 .9 ::9"
