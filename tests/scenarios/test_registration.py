"""A scenario is one new module and nothing else: a throwaway one dropped beside the others
is listed, runs end to end against a built-in target, and is judged by the checkers."""

from __future__ import annotations

import os
import sys

import pytest

from cnikit import scenarios

THROWAWAY = '''
from cnikit.scenarios.engine import scenario


@scenario("throwaway-one-pod", "one pod on each node, nothing else", nodes=2)
def run(ctx):
    ctx.add_pod(0)
    ctx.add_pod(1)
'''


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    (tmp_path / "throwaway_one_pod.py").write_text(THROWAWAY)
    monkeypatch.setattr(scenarios, "__path__", [*scenarios.__path__, str(tmp_path)])
    monkeypatch.setattr(scenarios, "_loaded", False)
    yield "throwaway-one-pod"
    from cnikit.scenarios.engine import REGISTRY

    REGISTRY.pop("throwaway-one-pod", None)
    sys.modules.pop("cnikit.scenarios.throwaway_one_pod", None)


def test_a_new_module_is_listed(throwaway):
    assert throwaway in scenarios.names()
    assert scenarios.get(throwaway).description == "one pod on each node, nothing else"


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_a_new_module_runs_end_to_end(throwaway, tmp_path):
    r = scenarios.run(throwaway, "hardened", seed=3, report_dir=tmp_path / "report")
    assert r.verdict == "holds", (r.error, r.evidence())
    assert r.expected == "holds"  # a scenario no profile lists must hold everywhere
    assert (tmp_path / "report" / "report.html").is_file()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_a_new_checker_class_judges_a_live_run(throwaway, tmp_path):
    from cnikit.check.checkers import CHECKERS, Checker

    class EveryPodIsSuspect(Checker):
        kind = "throwaway-suspect"

        def step(self, e, run):
            if e["process"] == "client" and e["f"] == "pod-add":
                self._open(e["value"]["pod"], e["time"], ip=e["value"]["ip"])

    try:
        r = scenarios.run(throwaway, "hardened", seed=3)
    finally:
        CHECKERS.pop("throwaway-suspect", None)
    assert r.verdict == "violation"
    assert {v["kind"] for v in r.violations} == {"throwaway-suspect"}
    assert len(r.violations) == 2
