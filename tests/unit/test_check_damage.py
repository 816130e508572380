"""Damage the nemesis does itself (an address it took from a pod, cnikit.check.damage) is
excused as a warning; what the build does with the address stays a violation."""

from __future__ import annotations

from cnikit.check.invariants import judge

T0 = 1000.0


def entry(i, t, process, type_, f, value):
    return {"index": i, "time": T0 + t, "mono": t, "process": process, "type": type_, "f": f,
            "value": value}


def history(*rows):
    return [entry(i, *row) for i, row in enumerate(rows)]


def add(t, pod, ip, node="i-a"):
    return (t, "client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": node, "ip": ip})


def owned(t, ip, node):
    return (t, "monitor", "info", "ownership",
            {"full": True, "set": {"10.0.0.9": ["i-a", "eni-a", False],
                                   **({ip: [node, "eni-x", False]} if node else {})}, "unset": []})


def fail(t, src, dst):
    return (t, "prober", "info", "fail", {"src": src, "dst": dst, "reason": "timeout"})


def recover(t, src, dst):
    return (t, "prober", "info", "recover", {"src": src, "dst": dst})


def take(t, type_, ip="10.0.0.8", fid="take-1"):
    return (t, "nemesis", type_, "ec2-take-held",
            {"op": "ec2-take-held", "id": fid, "target": {"eni": "eni-b", "ips": [ip]}})


IP = "10.0.0.8"
BASE = [add(0.0, "victim", IP), add(0.1, "peer", "10.0.0.9"), owned(0.2, IP, "i-a")]


def kinds(inv):
    return sorted(v.kind for v in inv.violations()), sorted(v.kind for v in inv.warnings())


def test_the_victims_damage_within_the_window_is_the_nemesis():
    inv = judge(history(*BASE, take(1.0, "start"), owned(1.1, IP, "i-b"), fail(1.2, "@vpc", "victim"),
                        take(4.0, "end"), owned(4.1, IP, "i-a"), recover(4.5, "@vpc", "victim")))
    assert kinds(inv) == ([], ["nemesis-damage", "nemesis-damage"])
    w = inv.warnings()[0]
    assert w.detail["nemesis"] == "take-1" and w.detail["excused"] in ("ip-not-owned", "unreachable")


def test_without_the_window_the_same_damage_is_a_violation():
    # The check can fail: the same history with no nemesis operation is the build's damage.
    inv = judge(history(*BASE, owned(1.1, IP, "i-b"), fail(1.2, "@vpc", "victim"),
                        owned(4.1, IP, "i-a"), recover(4.5, "@vpc", "victim")))
    assert kinds(inv) == (["ip-not-owned", "unreachable"], [])


def test_a_victim_still_dark_after_the_address_is_back_is_the_builds():
    inv = judge(history(*BASE, take(1.0, "start"), fail(1.2, "@vpc", "victim"),
                        take(4.0, "end"), recover(12.0, "@vpc", "victim")))
    (v,) = inv.violations()
    assert v.kind == "unreachable" and v.subject == "victim"
    assert v.since == T0 + 4.0 + inv.damage.grace and v.detail["after_nemesis"] == "take-1"
    assert [w.kind for w in inv.warnings()] == ["nemesis-damage"]


def test_a_second_pod_given_the_taken_address_is_the_builds():
    inv = judge(history(*BASE, take(1.0, "start"), owned(1.1, IP, "i-b"),
                        (2.0, "client", "ok", "pod-delete", {"pod": "victim"}),
                        add(2.5, "second", IP), take(4.0, "end"), owned(4.1, IP, "i-a")))
    assert [(v.kind, v.subject) for v in inv.violations()] == [("ip-not-owned", "second")]


def test_damage_before_the_window_is_not_excused():
    inv = judge(history(*BASE, fail(0.5, "@vpc", "victim"), take(1.0, "start"),
                        take(4.0, "end"), recover(4.5, "@vpc", "victim")))
    assert [v.kind for v in inv.violations()] == ["unreachable"]


def test_a_victim_dark_across_a_failed_take_and_a_second_take_is_excused_by_the_second():
    inv = judge(history(*BASE, take(1.0, "start", fid="take-1"),
                        (1.05, "nemesis", "end", "ec2-take-held",
                         {"op": "ec2-take-held", "id": "take-1", "by": "failed",
                          "target": {"eni": "eni-b", "ips": [IP]}}),
                        take(1.2, "start", fid="take-2"), fail(1.3, "@vpc", "victim"),
                        take(9.0, "end", fid="take-2"), recover(9.5, "@vpc", "victim")))
    assert inv.violations() == []
    assert [w.detail["nemesis"] for w in inv.warnings()] == ["take-2"]


def test_the_other_side_of_the_victims_first_failing_pair_is_not_blamed():
    inv = judge(history(*BASE, take(1.0, "start"), fail(1.2, "peer", "victim"),
                        fail(1.25, "@vpc", "victim"), take(4.0, "end"),
                        recover(4.5, "peer", "victim"), recover(4.5, "@vpc", "victim")))
    assert inv.violations() == []


def test_a_pod_failing_only_with_victims_of_two_takes_is_not_blamed():
    other = "10.0.0.7"
    inv = judge(history(*BASE, add(0.15, "victim2", other),
                        take(1.0, "start", fid="take-1"), take(1.1, "start", ip=other, fid="take-2"),
                        fail(1.2, "peer", "victim"), fail(1.2, "peer", "victim2"),
                        fail(1.3, "@vpc", "victim"), fail(1.3, "@vpc", "victim2"),
                        take(4.0, "end", fid="take-1"), take(4.0, "end", ip=other, fid="take-2"),
                        recover(4.5, "peer", "victim"), recover(4.5, "peer", "victim2"),
                        recover(4.5, "@vpc", "victim"), recover(4.5, "@vpc", "victim2")))
    # The peer is not blamed; only victim2, whose address this history never gives its node.
    assert [v.kind for v in inv.violations()] == ["ip-not-owned"]
    assert inv.violations()[0].subject == "victim2"


def test_only_the_kinds_the_nemesis_causes_are_excused_on_a_victim():
    """A victim's early reuse (a kind the nemesis's take does not cause) inside the window
    stays the build's: only excusable kinds are clipped (fails if _hits ignores the kind)."""
    from cnikit.check.checkers.base import Violation
    from cnikit.check.damage import NemesisDamage, excusable

    d = NemesisDamage(grace=1.0)
    state = type("State", (), {"by_ip": {IP: {"victim"}}})()
    d.step(entry(0, 1.0, *take(1.0, "start")[1:]), state)
    for kind in ("early-reuse", "shared-ip", "leak"):
        kept, excused = d.clip(Violation(kind, "victim", T0 + 2.0, T0 + 2.5))
        assert kept is not None and kept.kind == kind and excused is None, kind
    assert excusable() == ["ip-not-owned", "unreachable"]
    for kind in excusable():
        kept, excused = d.clip(Violation(kind, "victim", T0 + 2.0, T0 + 2.5))
        assert kept is None and excused.kind == "nemesis-damage", kind
