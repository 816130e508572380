"""A checker is one class and nothing else: defining it registers it with every run; a
checker that raises is recorded as a checker error (the run fails visibly) and never raises
into the thread that appended to the history."""

from __future__ import annotations

import pytest

from cnikit.check.checkers import CHECKERS, Checker
from cnikit.check.history import History
from cnikit.check.invariants import CHECKER_ERROR, Invariants, judge


def _add(h: History, pod: str, ip: str) -> None:
    h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": "i-1", "ip": ip})


@pytest.fixture
def throwaway():
    class OddOctet(Checker):
        """Throwaway: a pod whose IP ends in an odd number."""

        kind = "odd-octet"

        def step(self, e, run):
            if e["process"] == "client" and e["f"] == "pod-add":
                for name, pod in run.pods.items():
                    if int(pod["ip"].rsplit(".", 1)[1]) % 2:
                        self._open(name, e["time"], ip=pod["ip"])

    yield OddOctet
    CHECKERS.pop("odd-octet", None)


@pytest.fixture
def raising():
    class Broken(Checker):
        kind = "broken-on-purpose"

        def step(self, e, run):
            if e["f"] == "pod-add":
                raise KeyError("boom")

    yield Broken
    CHECKERS.pop("broken-on-purpose", None)


def test_the_builtin_checkers_are_registered():
    assert {"unreachable", "shared-ip", "ip-not-owned", "leak", "unprobed"} <= set(CHECKERS)


def test_defining_a_checker_is_the_only_step(throwaway):
    h = History()
    inv = Invariants()
    h.subscribe(inv.step)
    _add(h, "a", "10.0.1.4")
    _add(h, "b", "10.0.1.7")
    assert [(v.kind, v.subject) for v in inv.violations()] == [("odd-octet", "b")]
    # The same checker judges a saved history.
    assert [v.subject for v in judge(h.entries()).violations("odd-octet")] == ["b"]


def test_a_checker_that_raises_is_a_recorded_error_not_an_exception(raising):
    h = History()
    inv = Invariants()
    h.subscribe(inv.step)
    _add(h, "a", "10.0.1.4")  # would raise in this (the appending) thread without the guard
    _add(h, "b", "10.0.1.4")
    errs = inv.violations(CHECKER_ERROR)
    assert len(errs) == 1 and errs[0].subject == "broken-on-purpose"
    assert "KeyError" in errs[0].detail["error"]
    assert not inv.ok()
    # The other checkers went on: two pods with one IP.
    assert [v.subject for v in inv.violations("shared-ip")] == ["10.0.1.4"]
