"""The leak checker over histories written by hand: an address EC2 gives a node that the
build's view ([observe] introspection: daemon-view) assigns to a deleted pod's container, or
does not know at all, past the grace, is a leak: a warning in exploratory runs, a violation
when certifying (strict_leaks). Without the build's view nothing is judged."""

from __future__ import annotations

import os

import pytest

from cnikit.check.history import History
from cnikit.check.invariants import Invariants, judge

T0 = 1000.0
GRACE = 5.0


def live(strict: bool) -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=GRACE, strict_leaks=strict)
    h.subscribe(inv.step)
    return h, inv


def owners(h: History, at: float, **ips: str) -> None:
    h.info("monitor", "ownership", {"full": True, "set": {
        ip.replace("_", "."): ["i-1", "eni-1", ip == "10_0_1_4"] for ip in ips}}, at=at)


def view(h: History, at: float, ips: list[str], assigned: dict[str, str] | None = None,
         asked: float | None = None) -> None:
    value = {"instance_id": "i-1", "ips": ips, "assigned": assigned or {}}
    if asked is not None:
        value["at"] = asked
    h.info("monitor", "daemon-view", value, at=at)


def tick(h: History, at: float) -> None:
    h.info("prober", "stats", {"stale": []}, at=at)


def pod_lives_then_goes(h: History, leak: bool, delete_fails: bool = False) -> None:
    """Pod p on 10.0.1.9; deleted at T0+1; the build's view then still assigns the address
    to p (leak) or keeps it warm (no leak)."""
    owners(h, T0, **{"10_0_1_4": "", "10_0_1_9": ""})
    h.append("client", "ok", "pod-add", {"pod": "p", "node": 0, "instance_id": "i-1",
                                         "ip": "10.0.1.9"}, at=T0)
    view(h, T0 + 0.5, ["10.0.1.9"], {"10.0.1.9": "p"})
    h.append("client", "ok", "pod-delete", {"pod": "p", "ip": "10.0.1.9"}, at=T0 + 1)
    if delete_fails:
        h.append("client", "fail", "pod-delete", {"pod": "p", "error": "connection refused"},
                 at=T0 + 1.1)
    view(h, T0 + 1.5, ["10.0.1.9"], {"10.0.1.9": "p"} if leak else {})
    for s in range(2, 10):
        tick(h, T0 + s)


@pytest.mark.parametrize("strict, severity", [(False, "warning"), (True, "violation")])
def test_an_address_held_for_a_deleted_pod_past_the_grace_is_a_leak(strict, severity):
    h, inv = live(strict)
    pod_lives_then_goes(h, leak=True)
    [v] = [x for x in inv.violations() + inv.warnings() if x.kind == "leak"]
    assert (v.subject, v.severity, v.since) == ("10.0.1.9", severity, T0 + 1 + GRACE)
    assert v.detail["why"] == "assigned-to-deleted" and v.detail["container"] == "p"
    assert "which the build holds for p, deleted" in v.detail["what"]
    assert inv.ok() is (not strict)
    replay = judge(h.entries(), leak_grace=GRACE, strict_leaks=strict)
    assert [x.subject for x in replay.violations("leak") + replay.warnings("leak")] == ["10.0.1.9"]


@pytest.mark.parametrize("strict", [False, True])
def test_an_address_back_in_the_warm_pool_is_no_leak(strict):
    h, inv = live(strict)
    pod_lives_then_goes(h, leak=False)
    assert inv.violations() == [] and inv.warnings() == []


def test_a_failed_del_is_not_judged_the_runtime_would_retry_it():
    h, inv = live(True)
    pod_lives_then_goes(h, leak=True, delete_fails=True)
    assert inv.violations() == [] and inv.warnings() == []


@pytest.mark.parametrize("strict", [False, True])
def test_an_address_the_build_does_not_know_past_the_grace_is_a_leak_warning(strict):
    """EC2 does not say who put it there (the nemesis, another tenant): never a violation."""
    h, inv = live(strict)
    owners(h, T0, **{"10_0_1_4": "", "10_0_1_9": ""})
    view(h, T0, [])
    for s in range(1, 8):
        tick(h, T0 + s)
    [v] = inv.violations("leak") + inv.warnings("leak")
    assert (v.subject, v.severity, v.detail["why"]) == ("10.0.1.9", "warning", "unknown")
    assert inv.ok()
    # Not before the grace: the first tick past it opened it, dated at the grace's end.
    assert v.since == T0 + GRACE


def test_a_view_asked_for_before_the_delete_is_no_evidence_however_late_it_came():
    """A daemon busy with EC2 answered seconds late with its state of before the DEL (seen
    in certification: ec2-throttle-storm); only a view asked for after the delete counts."""
    h, inv = live(True)
    owners(h, T0, **{"10_0_1_9": ""})
    view(h, T0, ["10.0.1.9"], {"10.0.1.9": "p"})
    h.append("client", "ok", "pod-delete", {"pod": "p", "ip": "10.0.1.9"}, at=T0 + 1)
    view(h, T0 + 2.5, ["10.0.1.9"], {"10.0.1.9": "p"}, asked=T0 + 0.8)
    for s in range(3, 12):
        tick(h, T0 + s)
    assert inv.violations() == [] and inv.warnings() == []
    # A view asked for after the delete that still holds it: the leak (dated, as every
    # leak, at the grace's end).
    view(h, T0 + 12, ["10.0.1.9"], {"10.0.1.9": "p"}, asked=T0 + 11.9)
    tick(h, T0 + 12.5)
    [v] = inv.violations("leak")
    assert v.detail["why"] == "assigned-to-deleted" and v.since == T0 + 1 + GRACE


def test_within_the_grace_nothing_is_a_leak():
    h, inv = live(True)
    owners(h, T0, **{"10_0_1_9": ""})
    view(h, T0, ["10.0.1.9"], {"10.0.1.9": "p"})
    h.append("client", "ok", "pod-delete", {"pod": "p", "ip": "10.0.1.9"}, at=T0 + 1)
    tick(h, T0 + 1 + GRACE - 0.5)
    assert inv.violations() == [] and inv.warnings() == []


def test_without_the_builds_view_nothing_is_judged():
    h, inv = live(True)
    owners(h, T0, **{"10_0_1_9": ""})
    for s in range(1, 20):
        tick(h, T0 + s)
    assert inv.violations() == [] and inv.warnings() == []


def test_a_daemon_down_suspends_the_judgement_of_its_node():
    """A view read before the daemon went down is no evidence while it is down."""
    h, inv = live(True)
    owners(h, T0, **{"10_0_1_9": ""})
    view(h, T0, ["10.0.1.9"], {"10.0.1.9": "p"})
    h.append("client", "ok", "pod-delete", {"pod": "p", "ip": "10.0.1.9"}, at=T0 + 1)
    h.info("monitor", "daemon-view-error", {"instance_id": "i-1", "error": "refused"},
            at=T0 + 1.2)
    for s in range(2, 12):
        tick(h, T0 + s)
    assert inv.violations() == [] and inv.warnings() == []


def test_certification_runs_are_strict_and_exploratory_ones_are_not(monkeypatch):
    """cnikit certify sets CNIKIT_STRICT_LEAKS=1 for its runs (and its --jobs workers, which
    inherit the environment); outside it the variable is as it was."""
    from cnikit.certify.suite import strict_leaks
    from cnikit.scenarios.engine import STRICT_LEAKS_ENV

    monkeypatch.delenv(STRICT_LEAKS_ENV, raising=False)
    with strict_leaks():
        assert os.environ[STRICT_LEAKS_ENV] == "1"
    assert STRICT_LEAKS_ENV not in os.environ
    monkeypatch.setenv(STRICT_LEAKS_ENV, "0")
    with strict_leaks():
        assert os.environ[STRICT_LEAKS_ENV] == "1"
    assert os.environ[STRICT_LEAKS_ENV] == "0"


def test_a_detaching_enis_addresses_are_no_unknown_leak():
    """EC2 still gives a node a detaching ENI's addresses (slow-attachment, upstream #732)
    after the build let the ENI go: on their way out, not leaked."""
    for detaching, found in ((True, []), (False, ["10.0.1.10", "10.0.1.9"])):
        h, inv = live(False)
        owners(h, T0, **{"10_0_1_4": "", "10_0_1_9": "", "10_0_1_10": ""})
        if detaching:
            h.info("monitor", "loose-enis", {"enis": {}, "detaching": {"eni-1": {
                "was_on": "i-1", "mac": "0a:00:00:00:00:01",
                "ips": ["10.0.1.9", "10.0.1.10"]}}}, at=T0)
        view(h, T0 + 0.5, [])
        for s in range(1, 10):
            tick(h, T0 + s)
        assert sorted(x.subject for x in inv.warnings() if x.kind == "leak") == found
