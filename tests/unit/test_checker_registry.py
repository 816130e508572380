"""A checker is one module and nothing else: its class registers itself with every run; a
checker that raises is recorded as a checker error (the run fails visibly) and never raises
into the thread that appended to the history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    assert {"unreachable", "shared-ip", "ip-not-owned", "leak", "early-reuse",
            "unprobed"} <= set(CHECKERS)


ROOT = Path(__file__).resolve().parents[2]
ODD_OCTET_MODULE = '''
from cnikit.check.checkers.base import Checker


class OddOctet(Checker):
    kind = "odd-octet"

    def step(self, e, run):
        if e["process"] == "client" and e["f"] == "pod-add" and int(e["value"]["ip"][-1]) % 2:
            self._open(e["value"]["pod"], e["time"], ip=e["value"]["ip"])
'''
JUDGE = '''
import json, sys
from cnikit.check.history import History
from cnikit.check.invariants import Invariants, judge
h = History()
inv = Invariants()
h.subscribe(inv.step)
for pod, ip in (("a", "10.0.1.4"), ("b", "10.0.1.7")):
    h.append("client", "ok", "pod-add", {"pod": pod, "node": 0, "instance_id": "i-1", "ip": ip})
print(json.dumps({"live": [[v.kind, v.subject] for v in inv.violations()],
                  "replayed": [v.subject for v in judge(h.entries()).violations("odd-octet")]}))
'''


def test_a_new_checker_is_one_new_module(tmp_path):
    """A module dropped into a copy of cnikit/check/checkers/ judges every run of that copy,
    live and replayed, with nothing else edited."""
    shutil.copytree(ROOT / "cnikit", tmp_path / "cnikit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "cnikit" / "check" / "checkers" / "odd_octet.py").write_text(ODD_OCTET_MODULE)
    out = subprocess.run([sys.executable, "-c", JUDGE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"live": [["odd-octet", "b"]], "replayed": ["b"]}
    assert "odd-octet" not in CHECKERS  # the real package never had it


def test_a_checker_reading_another_steps_after_it():
    from cnikit.check.checkers import in_order
    from cnikit.check.checkers.leaks import Leaks
    from cnikit.check.checkers.ownership import Ownership

    kinds = [kind for kind, _ in in_order()]
    assert kinds.index(Ownership.kind) < kinds.index(Leaks.kind)


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
