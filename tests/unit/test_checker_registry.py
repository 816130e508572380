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


# -- what a checker says about its violations: evidence, report, nemesis damage ------------

T0 = 1_800_000_000.0


@pytest.fixture
def wrong_mtu():
    class WrongMtu(Checker):
        """Throwaway: the pod named `victim` has the wrong MTU. It declares how it reads
        (evidence and sentence), its colour and that the nemesis's act may cause it."""

        kind = "wrong-mtu"
        excusable = True
        colour, legend = "#123456", "pod with the wrong MTU"
        lane_word, outcome_predicate = "mtu", "had the wrong MTU"

        def step(self, e, run):
            v = e["value"] or {}
            if e["process"] == "client" and e["f"] == "pod-add" and v["pod"] == "victim":
                self._open("victim", e["time"], ip=v["ip"], mtu=1500)

        @classmethod
        def describe(cls, v, pods):
            return {"pod": v["subject"], "ip": v["detail"]["ip"],
                    "what": f"MTU {v['detail']['mtu']}, not the VPC's 9001"}

        @classmethod
        def sentence(cls, v, say):
            return f"pod {v['subject']} got MTU {v['detail']['mtu']} {say.span}"

        @classmethod
        def symptom(cls, v, ip):
            return f"pod {v['subject']} ({ip}) has MTU {v['detail']['mtu']}"

    yield WrongMtu
    CHECKERS.pop("wrong-mtu", None)
    assert "wrong-mtu" not in CHECKERS


def _one_pod(name: str, ip: str) -> History:
    h = History()
    h.append("client", "ok", "pod-add", {"pod": name, "node": 0, "instance_id": "i-1", "ip": ip},
             at=T0 + 2.0, mono=2.0)
    h.append("prober", "info", "stats", {"stale": []}, at=T0 + 5.0, mono=5.0)
    return h


def _evidence(h: History) -> list[str]:
    """What `cnikit run` prints for the history: the run's judging and its evidence lines."""
    from types import SimpleNamespace

    from cnikit.scenarios.engine import RunResult
    from cnikit.scenarios.engine.verdict import judge as _judge

    r = RunResult("s", "d", "p", 1, "error", None, 0.0, T0)
    _judge(r, SimpleNamespace(invariants=judge(h.entries())), h, [])
    return r.evidence()


def _report(tmp_path, h: History) -> tuple[dict, str]:
    from cnikit.report import write_report

    paths = write_report(tmp_path, {"scenario": "s", "profile": "p", "seed": 1, "history": h})
    return json.loads(paths["json"].read_text()), paths["html"].read_text()


def _symptom_and_outcome(doc: dict) -> tuple[str, str]:
    """The violation's symptom (the last link of its root-cause chain) and the outcome line
    the report makes of it."""
    from cnikit.report.rootcause import outcome

    chain = doc["violations"][0]["chain"]
    return chain[-1]["text"], outcome([x for x in chain if x["step"] == "symptom"])


def _excused(kind: str) -> bool:
    """Whether a violation of `kind` on a pod whose address the nemesis took is excused."""
    from cnikit.check.checkers import Violation
    from cnikit.check.damage import NemesisDamage, excusable

    d = NemesisDamage(grace=1.0)
    state = type("State", (), {"by_ip": {"10.0.1.8": {"victim"}}})()
    d.step({"process": "nemesis", "type": "start", "f": "ec2-take-held", "time": T0 + 1.0,
            "value": {"op": "ec2-take-held", "id": "take-1",
                      "target": {"eni": "eni-b", "ips": ["10.0.1.8"]}}}, state)
    kept, excused = d.clip(Violation(kind, "victim", T0 + 2.0, T0 + 2.5))
    assert (kept is None) == (excused is not None) == (kind in excusable())
    return excused is not None


def test_a_checker_says_how_its_violation_reads(wrong_mtu, tmp_path):
    """Its evidence line, its report sentence, symptom and outcome, its colour and word on
    the pod's lane and in the legend, and its excuse under the nemesis's own damage: all
    from the one class."""
    h = _one_pod("victim", "10.0.1.8")
    assert _evidence(h) == ["+2.00s wrong-mtu: pod victim ip 10.0.1.8 (MTU 1500, not the "
                            "VPC's 9001)"]
    doc, html = _report(tmp_path, h)
    assert doc["summary"] == ["pod victim got MTU 1500 at t=+0.00s (still at the end)"]
    assert 'background:#123456"></i>pod with the wrong MTU' in html
    assert 'fill="#123456"' in html and "mtu</text>" in html
    assert _symptom_and_outcome(doc) == ("pod victim (10.0.1.8) has MTU 1500",
                                         "pod victim had the wrong MTU")
    assert _excused("wrong-mtu")


def test_a_checker_that_declares_nothing_reads_by_the_defaults(throwaway, tmp_path):
    """The evidence line says its detail as it is, the report says its kind, subject and
    when, its lane is a strip in the default colour with no legend row, and the nemesis's
    damage never excuses it."""
    from cnikit.report.legend import C_VIOLATION_DEFAULT, legend_rows

    h = _one_pod("b", "10.0.1.7")
    assert _evidence(h) == ['+2.00s odd-octet: pod b ip 10.0.1.7 ({"ip": "10.0.1.7"})']
    doc, html = _report(tmp_path, h)
    assert doc["summary"] == ["odd-octet on b at t=+0.00s (still at the end)"]
    assert f'height="5" fill="{C_VIOLATION_DEFAULT}"' in html
    assert all(words != "odd-octet" for _, words in legend_rows())
    assert _symptom_and_outcome(doc) == ("odd-octet: on b", "odd-octet: on b")
    assert not _excused("odd-octet")
