"""The cooldown-wait checker over histories written by hand: a pod whose ADDs keep failing
while every free address of its node cools down and their ENI has room is a violation past
half the cooldown; a free address out of its cooldown, a full ENI, a nemesis fault in force
or a node with prefixes is not judged."""

from __future__ import annotations

from cnikit.check.history import History
from cnikit.check.invariants import Invariants

T0 = 1000.0
COOLDOWN = 1.5  # upstream's 30 s at the scenarios' 0.05: the bound is 0.75 s
PRIMARY = "10.0.1.4"


def live(per_eni: int = 10) -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(ip_cooldown=COOLDOWN)
    h.subscribe(inv.step)
    h.info("monitor", "nodes", {"nodes": {"i-1": {"node": 0, "instance_type": "m5.large",
                                                  "ipv4_per_eni": per_eni}}}, at=T0)
    return h, inv


def owned(h: History, at: float, secondaries: list[str], full: bool = True,
          prefixes: dict | None = None) -> None:
    ips = {PRIMARY: ["i-1", "eni-a", True], **{ip: ["i-1", "eni-a", False] for ip in secondaries}}
    h.info("monitor", "ownership", {"version": 1, "full": full, "set": ips, "unset": [],
                                    "prefixes_set": prefixes or {}, "prefixes_unset": []}, at=at)


def pods(h: History, at: float, *named: tuple[str, str]) -> None:
    for pod, ip in named:
        h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": "i-1",
                                             "ip": ip}, at=at)


def deleted(h: History, at: float, *names: str) -> None:
    for pod in names:
        h.append("client", "ok", "pod-delete", {"pod": pod}, at=at)


def fails(h: History, pod: str, start: float, until: float, every: float = 0.1) -> None:
    t = start
    while t <= until + 1e-9:
        h.append("client", "fail", "pod-add", {"pod": pod, "node": 0,
                                               "error": "no IP available"}, at=t)
        t += every


def waits(inv: Invariants) -> list:
    return [v for v in inv.violations() if v.kind == "cooldown-wait"]


def cooling_node() -> tuple[History, Invariants]:
    """Three pods on a ten-address ENI, all deleted at T0 + 1: their addresses cool."""
    h, inv = live()
    owned(h, T0, ["10.0.1.10", "10.0.1.11", "10.0.1.12"])
    pods(h, T0, ("p1", "10.0.1.10"), ("p2", "10.0.1.11"), ("p3", "10.0.1.12"))
    deleted(h, T0 + 1, "p1", "p2", "p3")
    return h, inv


def test_waiting_out_the_cooldown_with_room_on_the_eni_is_a_violation():
    h, inv = cooling_node()
    fails(h, "p4", T0 + 1.05, T0 + 2.4)
    found = waits(inv)
    assert [v.subject for v in found] == ["p4"]
    d = found[0].detail
    assert d["eni"] == "eni-a" and d["cooling"] == ["10.0.1.10", "10.0.1.11", "10.0.1.12"]
    assert 0.75 < d["waited"] < 0.9 and d["bound"] == 0.75
    assert "waited the cooldown out" in d["what"]


def test_a_top_up_within_the_bound_is_none():
    h, inv = cooling_node()
    fails(h, "p4", T0 + 1.05, T0 + 1.6)
    owned(h, T0 + 1.65, ["10.0.1.13"], full=False)
    pods(h, T0 + 1.7, ("p4", "10.0.1.13"))
    fails(h, "p5", T0 + 1.75, T0 + 2.3)  # a second pod waits afresh, within the bound
    assert waits(inv) == []


def test_a_free_address_out_of_its_cooldown_is_not_this_rule():
    h, inv = live()
    owned(h, T0, ["10.0.1.10", "10.0.1.11"])
    pods(h, T0, ("p1", "10.0.1.10"))  # 10.0.1.11 never held: free, not cooling
    deleted(h, T0 + 1, "p1")
    fails(h, "p4", T0 + 1.05, T0 + 2.4)
    assert waits(inv) == []


def test_a_full_eni_is_not_judged():
    h, inv = live(per_eni=4)  # the primary and three secondaries: full
    owned(h, T0, ["10.0.1.10", "10.0.1.11", "10.0.1.12"])
    pods(h, T0, ("p1", "10.0.1.10"), ("p2", "10.0.1.11"), ("p3", "10.0.1.12"))
    deleted(h, T0 + 1, "p1", "p2", "p3")
    fails(h, "p4", T0 + 1.05, T0 + 2.4)
    assert waits(inv) == []


def test_a_nemesis_fault_in_force_is_not_judged_and_the_wait_counts_from_its_end():
    h, inv = cooling_node()
    h.append("nemesis", "start", "ec2-fault", {"op": "ec2-fault", "id": "ec2f-1",
                                               "target": {}}, at=T0 + 0.5)
    fails(h, "p4", T0 + 1.05, T0 + 1.9)
    h.append("nemesis", "end", "ec2-fault", {"op": "ec2-fault", "id": "ec2f-1",
                                             "target": {}}, at=T0 + 2.0)
    fails(h, "p4", T0 + 2.0, T0 + 2.45)  # 0.45 s since the fault ended: within the bound
    assert waits(inv) == []
    fails(h, "p4", T0 + 2.5, T0 + 2.8)  # the cooldown over at T0 + 2.5: free again
    assert waits(inv) == []


def test_a_node_with_prefixes_or_no_cooldown_is_not_judged():
    h, inv = live()
    owned(h, T0, ["10.0.1.10"], prefixes={"10.0.1.32/28": ["i-1", "eni-a"]})
    pods(h, T0, ("p1", "10.0.1.10"))
    deleted(h, T0 + 1, "p1")
    fails(h, "p4", T0 + 1.05, T0 + 2.4)
    assert waits(inv) == []
    h = History()
    inv = Invariants(ip_cooldown=0.0)
    h.subscribe(inv.step)
    fails(h, "p4", T0, T0 + 5)
    assert waits(inv) == []
