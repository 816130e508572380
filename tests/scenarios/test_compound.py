"""Compound faults on live clusters: the nemesis's own damage told apart from the build's, and
random-chaos recording which faults it combined. (Each compound scenario's verdict on every
profile is asserted by test_matrix.)"""

from __future__ import annotations

import json
import os

import pytest

from cnikit import scenarios

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


@pytest.mark.timeout(180)
def test_a_pod_whose_address_the_nemesis_took_is_excused_only_while_it_is_taken(tmp_path):
    r = scenarios.run("ec2-takes-held-address", "hardened", seed=1, report_dir=tmp_path)
    assert r.verdict == "holds", r.evidence()
    excused = [w for w in r.warnings if w["kind"] == "nemesis-damage"]
    # The victim went dark (the prober saw it) while its address was elsewhere ...
    assert {w["detail"]["excused"] for w in excused} >= {"unreachable", "ip-not-owned"}
    takes = {e["value"]["id"]: e for e in r.history
             if e["process"] == "nemesis" and e["f"] == "ec2-take-held" and e["type"] == "start"}
    for w in excused:  # ... and each excuse lies within its take's window
        assert takes[w["detail"]["nemesis"]]["time"] <= w["since"]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert "address taken" in doc["coverage"]["classes"]


@pytest.mark.timeout(240)
def test_random_chaos_records_the_fault_combinations_it_drew(tmp_path):
    seed = 2
    print(f"random-chaos seed {seed}")
    r = scenarios.run("random-chaos", "hardened", seed=seed, duration=8, report_dir=tmp_path)
    assert r.verdict == "holds", r.evidence()
    assert any(op["op"] == "compound" and "result" in op for op in r.schedule)
    (cov,) = [e["value"] for e in r.history if e["f"] == "coverage"]
    assert cov["seed"] == seed and cov["pairs"]
    assert any("+" in fam for fam in cov["families"])
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["coverage"]["pairs"] and "Fault combinations" in (tmp_path / "report.html").read_text()
