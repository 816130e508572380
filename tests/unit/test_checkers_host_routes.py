"""The host-route checker over synthetic netlink dumps (host-net entries, as
cnikit.check.hostnet records them): a source rule into another ENI's table misroutes, a
missing rule on a policy-routing node leaves the pod's replies on the wrong ENI, a lost host
route darkens the pod, a rule left after DEL leaks; a build with one route table, or one
that restores its rules within the grace, is not failed."""

from __future__ import annotations

from cnikit.check.history import History
from cnikit.check.invariants import Invariants

T0 = 1000.0
GRACE = 2.0  # the leak grace: the checker's own is twice it
POD_A, POD_B = "10.0.1.20", "10.0.1.30"  # A on eth0's ENI, B on eth1's
ENIS = {"eth0": "eni-0", "eth1": "eni-1", "eth2": "eni-2"}
UPSTREAM_ROUTES = [[254, "default", "eth0", "10.0.1.1"], [2, "default", "eth1", "10.0.1.1"],
                   [3, "default", "eth2", "10.0.1.1"]]


def run() -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=GRACE)
    h.subscribe(inv.step)
    h.info("monitor", "ownership", {"full": True, "set": {
        "10.0.1.10": ["i-1", "eni-0", True], POD_A: ["i-1", "eni-0", False],
        POD_B: ["i-1", "eni-1", False]}}, at=T0)
    for pod, ip in (("a", POD_A), ("b", POD_B)):
        h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": "i-1",
                                             "ip": ip}, at=T0)
    return h, inv


def dump(h: History, at: float, rules: list, routes: list | None = None,
         host_routes: bool = True) -> None:
    """One node's kernel state: upstream's layout by default (rule 512 to each pod, 1536
    from B into table 2, each pod's host route in main)."""
    hosts = [[254, f"{POD_A}/32", "enia", None], [254, f"{POD_B}/32", "enib", None]]
    h.info("monitor", "host-net", {
        "node": 0, "instance_id": "i-1", "enis": ENIS, "rules": rules,
        "routes": (UPSTREAM_ROUTES if routes is None else routes) + (hosts if host_routes
                                                                     else [])}, at=at)


def upstream_rules(table_of_b: int = 2) -> list:
    return [[512, None, f"{POD_A}/32", 254], [512, None, f"{POD_B}/32", 254],
            [1536, f"{POD_B}/32", None, table_of_b]]


def ticks(h: History, until: float) -> None:
    """Prober rounds every 0.5 s, from the history's last entry to `until`."""
    t = h.entries()[-1]["time"] + 0.5
    while t <= until:
        h.info("prober", "stats", {"stale": []}, at=t)
        t += 0.5


def found(inv: Invariants) -> dict[str, str]:
    return {v.subject: v.detail["why"] for v in inv.checker("host-route").all()}


def test_upstreams_layout_holds():
    h, inv = run()
    dump(h, T0, upstream_rules())
    ticks(h, T0 + 10)
    assert found(inv) == {}


def test_a_source_rule_into_another_enis_table_misroutes_after_the_grace():
    """cilium #39839: the address moved to eth2's ENI, its rule still looks up eth1's table."""
    h, inv = run()
    dump(h, T0, upstream_rules())
    h.info("monitor", "ownership", {"set": {POD_B: ["i-1", "eni-2", False]}, "unset": []},
           at=T0 + 1)
    ticks(h, T0 + 1 + 2 * GRACE - 0.5)
    assert found(inv) == {}, "within the grace a build may still move the rule"
    ticks(h, T0 + 1 + 2 * GRACE + 0.5)
    v = inv.checker("host-route").open[POD_B]
    assert v.detail["why"] == "misroute" and v.detail["pods"] == ["b"]
    assert "eth1 (eni-1)" in v.detail["what"] and "eni-2" in v.detail["what"]


def test_rules_flushed_and_never_restored_leave_the_secondary_pod_misrouted():
    """upstream #3309: networkd flushed the rules; 1.18's daemon never puts them back."""
    h, inv = run()
    dump(h, T0, upstream_rules())
    dump(h, T0 + 1, [])
    ticks(h, T0 + 1 + 2 * GRACE + 0.5)
    assert found(inv) == {POD_B: "missing-rule"}


def test_rules_restored_within_the_grace_hold():
    h, inv = run()
    dump(h, T0, upstream_rules())
    dump(h, T0 + 1, [])
    ticks(h, T0 + 1 + GRACE)
    dump(h, T0 + 1 + GRACE + 0.1, upstream_rules())
    ticks(h, T0 + 10 * GRACE)
    assert found(inv) == {}


def test_a_flushed_table_lets_replies_fall_through_to_main():
    h, inv = run()
    dump(h, T0, upstream_rules())
    dump(h, T0 + 1, upstream_rules(), routes=[r for r in UPSTREAM_ROUTES if r[0] == 254])
    ticks(h, T0 + 1 + 2 * GRACE + 0.5)
    assert found(inv) == {POD_B: "misroute"}
    assert "table main" in inv.checker("host-route").open[POD_B].detail["what"]


def test_one_route_table_for_every_pod_is_a_design_not_a_fault():
    h, inv = run()
    dump(h, T0, [], routes=[[254, "default", "eth0", "10.0.1.1"]])
    ticks(h, T0 + 10 * GRACE)
    assert found(inv) == {}


def test_a_host_route_that_goes_darkens_the_pod_until_it_is_back():
    h, inv = run()
    dump(h, T0, upstream_rules())
    dump(h, T0 + 1, upstream_rules(), host_routes=False)  # veths deleted
    ticks(h, T0 + 1 + 2 * GRACE + 0.5)
    assert found(inv) == {POD_A: "no-host-route", POD_B: "no-host-route"}
    dump(h, T0 + 10, upstream_rules())
    assert not inv.checker("host-route").open


def test_a_rule_left_after_del_is_a_leak_after_the_leak_grace():
    h, inv = run()
    dump(h, T0, upstream_rules())
    h.append("client", "ok", "pod-delete", {"pod": "b", "ip": POD_B}, at=T0 + 1)
    ticks(h, T0 + 1 + GRACE - 0.5)
    assert found(inv) == {}
    ticks(h, T0 + 1 + GRACE + 0.5)
    v = inv.checker("host-route").open[POD_B]
    assert v.detail["why"] == "leaked-rule" and v.severity == "warning"
    dump(h, T0 + 5, upstream_rules()[:1])  # the build's late clean-up
    assert not inv.checker("host-route").open


def test_a_rule_for_an_enis_own_address_is_not_a_leak():
    h, inv = run()
    dump(h, T0, upstream_rules() + [[1536, "10.0.1.10/32", None, 254]])
    ticks(h, T0 + 10 * GRACE)
    assert found(inv) == {}
