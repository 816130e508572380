"""The early-reuse checker (upstream 1091) over histories written by hand: an address given
to a new pod within the required cooldown of its old pod's delete, reached there by the old
pod's lingering flows, is a violation with evidence; either half alone is not."""

from __future__ import annotations

from cnikit.check.history import History
from cnikit.check.invariants import Invariants, judge

T0 = 1000.0
COOLDOWN = 1.5


def live(cooldown: float = COOLDOWN) -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=5, ip_cooldown=cooldown)
    h.subscribe(inv.step)
    return h, inv


def add(h: History, pod: str, ip: str, at: float) -> None:
    h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": "i-1", "ip": ip},
             at=at)


def delete(h: History, pod: str, ip: str, at: float) -> None:
    h.append("client", "ok", "pod-delete", {"pod": pod, "ip": ip}, at=at)


def stale(h: History, old: str, new: str, ip: str, at: float, src: str = "peer") -> None:
    h.info("prober", "stale", {"src": src, "dst": old, "by": new, "ip": ip, "after": at - T0},
           at=at)


def reuse(h: History, reused_after: float, reached_after: float, src: str = "peer") -> None:
    """peer and x live; x deleted at T0; y gets x's IP reused_after later; x's flow reaches
    y reached_after its delete."""
    add(h, "peer", "10.0.1.4", T0 - 10)
    add(h, "x", "10.0.1.7", T0 - 10)
    delete(h, "x", "10.0.1.7", T0)
    add(h, "y", "10.0.1.7", T0 + reused_after)
    stale(h, "x", "y", "10.0.1.7", T0 + reached_after, src)


def test_a_reuse_within_the_cooldown_reached_by_the_old_flows_is_a_violation():
    h, inv = live()
    reuse(h, 0.4, 0.5)
    [v] = inv.violations("early-reuse")
    assert (v.subject, v.since, v.severity) == ("y", T0 + 0.5, "violation")
    d = v.detail
    assert (d["ip"], d["deleted_pod"], d["sent_from"]) == ("10.0.1.7", "x", "peer")
    assert (d["reassigned_after"], d["reached_after"], d["cooldown"]) == (0.4, 0.5, COOLDOWN)
    assert d["what"].startswith("traffic for deleted pod x reached its successor y on IP "
                                "10.0.1.7 0.50s after x's delete")
    assert not inv.ok()
    # The same history replayed: the same verdict.
    assert [x.subject for x in judge(h.entries(), ip_cooldown=COOLDOWN)
            .violations("early-reuse")] == ["y"]


def test_more_stale_answers_are_counted_on_the_one_violation():
    h, inv = live()
    reuse(h, 0.4, 0.5)
    stale(h, "x", "y", "10.0.1.7", T0 + 0.6)
    [v] = inv.violations("early-reuse")
    assert v.detail["stale_answers"] == 2


def test_a_reuse_after_the_cooldown_holds_even_when_old_flows_reach_it():
    h, inv = live()
    reuse(h, COOLDOWN + 0.1, COOLDOWN + 0.2)
    assert inv.violations() == []


def test_a_reuse_within_the_cooldown_that_no_old_flow_reaches_holds():
    h, inv = live()
    add(h, "x", "10.0.1.7", T0 - 10)
    delete(h, "x", "10.0.1.7", T0)
    add(h, "y", "10.0.1.7", T0 + 0.3)
    stale(h, "z", "y", "10.0.1.7", T0 + 0.4)  # another deleted pod's flow: not x's successor
    assert inv.violations() == []


def test_the_successor_itself_is_no_peer_of_the_deleted_pod():
    h, inv = live()
    reuse(h, 0.4, 0.5, src="y")
    assert inv.violations() == []


def test_flows_of_every_recent_holder_count():
    """x, then y (briefly), then w on one IP within x's cooldown: x's flows reaching w break."""
    h, inv = live()
    add(h, "x", "10.0.1.7", T0 - 10)
    delete(h, "x", "10.0.1.7", T0)
    add(h, "y", "10.0.1.7", T0 + 0.2)
    delete(h, "y", "10.0.1.7", T0 + 0.4)
    add(h, "w", "10.0.1.7", T0 + 0.6)
    stale(h, "x", "w", "10.0.1.7", T0 + 0.7)
    [v] = inv.violations("early-reuse")
    assert (v.subject, v.detail["deleted_pod"]) == ("w", "x")


def test_no_cooldown_required_judges_nothing():
    h, inv = live(cooldown=0)
    reuse(h, 0.1, 0.2)
    assert inv.violations() == []
    assert judge(h.entries()).violations() == []  # the default: not judged


def test_a_reuse_in_the_cooldown_no_flow_reached_is_unjudged_not_held():
    """The bug with its proof missing (the prober held off the CPU): too slow, never holds.
    With too little of the cooldown left, or before the cooldown is over, it says nothing."""
    from cnikit.check.checkers.early_reuse import MIN_LEFT_S
    from cnikit.check.stall import run_too_slow

    h, inv = live()
    add(h, "peer", "10.0.1.4", T0 - 10)
    add(h, "x", "10.0.1.7", T0 - 10)
    delete(h, "x", "10.0.1.7", T0)
    add(h, "y", "10.0.1.7", T0 + 0.4)
    assert inv.unjudged() == []  # the cooldown is not over yet: a flow may still reach y
    add(h, "later", "10.0.1.9", T0 + COOLDOWN + 0.1)
    [why] = inv.unjudged()
    assert why.startswith("y got deleted pod x's IP 0.40s after its delete (cooldown 1.50s)")
    assert inv.violations() == []
    assert run_too_slow(None, [], T0, inv.unjudged()).startswith(
        "the machine was too slow for the time scale: y got deleted pod x's IP")

    h, inv = live()  # the old flows did reach y: a violation, nothing unjudged
    reuse(h, 0.4, 0.5)
    add(h, "later", "10.0.1.9", T0 + COOLDOWN + 0.1)
    assert inv.unjudged() == [] and inv.violations("early-reuse")

    h, inv = live()  # reused with less than MIN_LEFT_S left: a quiet machine may miss it too
    add(h, "x", "10.0.1.7", T0 - 10)
    delete(h, "x", "10.0.1.7", T0)
    add(h, "y", "10.0.1.7", T0 + COOLDOWN - MIN_LEFT_S / 2)
    add(h, "later", "10.0.1.9", T0 + COOLDOWN + 0.1)
    assert inv.unjudged() == []
