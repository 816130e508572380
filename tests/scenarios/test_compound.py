"""Compound faults on live clusters: random-chaos recording which faults it combined. (Each
compound scenario's verdict on every profile is asserted by test_matrix; the nemesis's own
damage told apart from the build's, by its ec2-takes-held-address cell: cell_checks.py.)"""

from __future__ import annotations

import json
import os

import pytest

from cnikit import scenarios

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


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
