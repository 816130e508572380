"""The adaptive time scale's rules (cnikit.scenarios.engine.adapt) on stand-in results: a
run too slow at its scale is run again at each slower factor until one is judged; a
violation or a judged verdict ends it; the attempts are kept; bad settings are one line."""

from __future__ import annotations

import pytest

from cnikit.errors import EnvironmentProblem
from cnikit.report.words import time_scale_sentence
from cnikit.scenarios.engine import adapt
from cnikit.scenarios.engine.result import RunResult

SLOW = "the machine was too slow for the time scale: no pod came within the IP cooldown"


def _attempts(verdicts: list[str]):
    """attempt(factor) playing `verdicts` in turn; the factors it was called with."""
    called: list[float] = []

    def attempt(factor: float) -> RunResult:
        v = verdicts[len(called)]
        called.append(factor)
        r = RunResult("s", "d", "p", 1, v, "holds", 1.0, 0.0,
                      params={"scale": 0.05 * factor})
        if v == "slow":
            r.verdict, r.too_slow, r.precondition = "inconclusive", SLOW, SLOW
        return r

    return attempt, called


def _run(verdicts, factors=(1.0, 2.0, 4.0), report_dir=None, write=None):
    attempt, called = _attempts(verdicts)
    said: list[str] = []
    r = adapt.run(attempt, 0.05, factors, report_dir, write or (lambda d, r: {}), said.append,
                  "s [p] seed 1")
    return r, called, said


def test_a_judged_first_run_is_the_only_one():
    r, called, said = _run(["holds"])
    assert (r.verdict, called, r.attempts, said) == ("holds", [1.0], [], [])
    assert time_scale_sentence(0.05, r.attempts) is None


def test_a_run_too_slow_is_run_again_slower_until_judged():
    r, called, said = _run(["slow", "slow", "violation"])
    assert called == [1.0, 2.0, 4.0] and r.verdict == "violation"
    assert [a["scale"] for a in r.attempts] == [0.05, 0.1]
    assert all(a["too_slow"] == SLOW for a in r.attempts)
    assert r.params["scale"] == 0.2 and r.params["base_scale"] == 0.05
    assert said[0] == "s [p] seed 1: too slow for time scale 0.05; again at 0.1 (2x)"
    assert time_scale_sentence(0.2, r.attempts) == (
        "judged at time scale 0.2 (4x slower): at 0.05, 0.1 the machine was too slow (no pod "
        "came within the IP cooldown)")


def test_too_slow_at_every_scale_is_inconclusive_and_says_so():
    r, called, _ = _run(["slow", "slow", "slow"])
    assert called == [1.0, 2.0, 4.0] and r.verdict == "inconclusive"
    assert r.too_slow.startswith(SLOW)
    assert r.too_slow.endswith("(at every time scale tried: 0.05, 0.1 and 0.2)")
    assert r.precondition == r.too_slow


@pytest.mark.parametrize("verdict", ["violation", "holds", "error"])
def test_a_judged_verdict_is_never_run_again(verdict):
    assert _run([verdict])[1] == [1.0]


def test_an_inconclusive_precondition_is_not_the_machine_and_is_not_run_again():
    attempt, called = _attempts(["inconclusive"])
    r = adapt.run(attempt, 0.05, (1.0, 2.0), None, lambda d, r: {}, lambda m: None, "x")
    assert (r.verdict, called) == ("inconclusive", [1.0])


def test_each_slow_attempt_keeps_its_report_beside_the_final_one(tmp_path):
    written = []

    def write(d, r):
        written.append((d, r.params["scale"]))
        return {"json": d / "report.json"}

    r, _, _ = _run(["slow", "holds"], report_dir=tmp_path, write=write)
    assert written == [(tmp_path / "scale-0.05", 0.05), (tmp_path, 0.1)]
    assert r.attempts[0]["report"] == str(tmp_path / "scale-0.05" / "report.html")
    assert r.report == {"json": str(tmp_path / "report.json")}


def test_factors_from_the_environment(monkeypatch):
    monkeypatch.delenv(adapt.ENV, raising=False)
    assert adapt.factors() == (1.0, 2.0, 4.0)
    monkeypatch.setenv(adapt.ENV, "3")
    assert adapt.factors() == (1.0, 3.0)
    monkeypatch.setenv(adapt.ENV, "none")
    assert adapt.factors() == (1.0,)
    assert adapt.factors(()) == (1.0,)


@pytest.mark.parametrize("raw", ["x", "2,2", "4,2", "0.5", "32"])
def test_bad_factors_are_one_line(monkeypatch, raw):
    monkeypatch.setenv(adapt.ENV, raw)
    with pytest.raises(EnvironmentProblem) as e:
        adapt.factors()
    assert "\n" not in str(e.value) and adapt.ENV in str(e.value)
