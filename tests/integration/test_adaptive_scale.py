"""A real run that loses its staged race at the default time scale is run again slower and
judged there (cnikit.scenarios.engine.adapt): the result, the run record and both reports
say which scale the verdict came from and why. The scenario stands in for one whose race a
busy machine lost: it declares itself too slow below a time scale of 0.1."""

from __future__ import annotations

import json
import os

import pytest

from cnikit.scenarios.engine import Scenario, TooSlow, run_scenario
from cnikit.scenarios.parallel import run_record

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces")]


def _race_lost_below_a_tenth(ctx) -> None:
    ctx.require_pod(0)
    if ctx.scale < 0.1:
        raise TooSlow(f"the pod came after its cooldown ({ctx.scale:g})")
    ctx.step(f"the race set up at time scale {ctx.scale:g}")


def test_a_run_too_slow_at_its_scale_is_judged_at_a_slower_one(tmp_path, monkeypatch):
    monkeypatch.delenv("CNIKIT_SLOWER_SCALES", raising=False)
    sc = Scenario("race-lost-when-fast", "a race lost below time scale 0.1",
                  _race_lost_below_a_tenth, nodes=1)
    said: list[str] = []
    r = run_scenario(sc, "hardened", seed=3, report_dir=tmp_path / "report", scale=0.05,
                     progress=said.append)
    assert r.verdict == "holds" and r.too_slow is None
    assert r.params["scale"] == 0.1 and r.params["base_scale"] == 0.05
    [first] = r.attempts
    assert (first["scale"], first["verdict"]) == (0.05, "inconclusive")
    assert "the pod came after its cooldown (0.05)" in first["too_slow"]
    assert first["run_id"] != r.params["run_id"], "each attempt is a run of its own"
    assert "race-lost-when-fast [hardened] seed 3: too slow for time scale 0.05; " \
           "again at 0.1 (2x)" in said
    final = json.loads((tmp_path / "report" / "report.json").read_text())
    assert final["summary"][0].startswith("judged at time scale 0.1 (2x slower): at 0.05 the "
                                          "machine was too slow (the pod came after")
    assert final["attempts"][0]["scale"] == 0.05
    assert "time scale 0.1" in (tmp_path / "report" / "report.html").read_text()
    slow = json.loads((tmp_path / "report" / "scale-0.05" / "report.json").read_text())
    assert slow["verdict"] == "inconclusive" and slow["params"]["scale"] == 0.05
    rec = run_record(r, sc.name, 3, tmp_path)
    assert rec["scale"] == 0.1 and rec["attempts"][0]["too_slow"] == first["too_slow"]
