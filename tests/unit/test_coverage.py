"""Fault-combination coverage (cnikit.report.coverage) and random-chaos's compound draws."""

from __future__ import annotations

import itertools

from cnikit.report import build
from cnikit.report.coverage import coverage
from cnikit.scenarios.random_chaos import COMPOUND_PARTS, make_schedule

T0 = 500.0


def nem(i, t, type_, op, **value):
    return {"index": i, "time": T0 + t, "mono": t, "process": "nemesis", "type": type_, "f": op,
            "value": {"op": op, "target": {}, **value}}


HISTORY = [
    nem(0, 0.0, "start", "imds-fault", id="f1", kind="stale"),
    nem(1, 1.0, "info", "ec2-assign-elsewhere"),
    nem(2, 2.0, "start", "ec2-fault", id="ec2f-1", kind="describe-lag", duration=2.0),
    nem(3, 3.0, "start", "daemon-restart", id="restart-0-1"),
    nem(4, 3.5, "end", "daemon-restart", id="restart-0-1"),
    nem(5, 5.0, "end", "imds-fault", id="f1"),
    nem(6, 9.0, "start", "imds-fault", id="f2", kind="error"),  # alone: no combination
    nem(7, 10.0, "end", "imds-fault", id="f2"),
]


def test_overlapping_faults_are_counted_by_pair_set_and_family():
    cov = coverage(HISTORY)
    pairs = {tuple(p["faults"]): p for p in cov["pairs"]}
    assert pairs[("ec2 describe-lag", "imds stale")]["seconds"] == 2.0  # 2..4 (its duration)
    assert pairs[("daemon down", "ec2 describe-lag")]["seconds"] == 0.5
    assert pairs[("address moved", "imds stale")] == {"faults": ["address moved", "imds stale"],
                                                      "seconds": 0.0, "times": 1}
    assert not any("imds error" in p["faults"] for p in cov["pairs"])
    top = cov["combinations"][0]
    assert top["faults"] == ["daemon down", "ec2 describe-lag", "imds stale"]
    assert top["seconds"] == 0.5
    assert cov["families"] == {"imds+ec2": 1.5, "imds+ec2+process": 0.5}
    assert cov["classes"]["imds stale"] == {"times": 1, "seconds": 5.0}


def test_no_faults_no_combinations():
    assert coverage([]) == {"classes": {}, "pairs": [], "combinations": [], "families": {}}


def test_the_report_shows_the_coverage():
    from cnikit.report import html

    doc, tl = build({"scenario": "x", "profile": "hardened", "seed": 1, "verdict": "holds",
                     "seconds": 1.0, "violations": [], "warnings": [], "history": HISTORY,
                     "imds_events": [], "audit": [], "versions": {}})
    assert doc["coverage"]["families"]["imds+ec2+process"] == 0.5
    page = html.render(doc, tl)
    assert "Fault combinations" in page and "ec2 describe-lag + imds stale" in page


def test_compounds_are_drawn_from_the_seed_and_cover_every_pair_of_families():
    seed = 7
    print("seed", seed)
    assert make_schedule(seed, 15) == make_schedule(seed, 15)
    met = set()
    for s in range(1, 11):
        sched = make_schedule(s, 15)
        assert [op["at"] for op in sched] == sorted(op["at"] for op in sched)
        for op in sched:
            if op["op"] == "compound":
                fams = [p["family"] for p in op["parts"]]
                assert len(set(fams)) == len(fams) >= 2
                met |= set(itertools.combinations(sorted(fams), 2))
                kinds = {p["kind"] for p in op["parts"]}
                if "take-held" in kinds:  # its address is given back later
                    assert any(o["op"] == "give-back" and o["id"] == op["id"] and
                               o["at"] >= op["at"] for o in sched)
    assert met == set(itertools.combinations(sorted(COMPOUND_PARTS), 2))


def test_an_old_seed_keeps_its_single_operations():
    # Compounds and nemesis actions come from streams of their own: the single operations a
    # seed drew before they existed are still there, at the same times.
    import random

    from cnikit.scenarios.random_chaos import _singles
    later = ("compound", "give-back", "act", "act-end")
    singles = [op for op in make_schedule(22, 15) if op["op"] not in later]
    assert singles == _singles(random.Random(22), 15, 2)
