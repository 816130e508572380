"""The planted bugs of bench/bench_detection.py still apply to today's daemon: each mutant's
text occurs exactly once in its file, so a refactor that moves the code fails here instead of
silently dropping the mutant from the detection benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_mutants():
    spec = importlib.util.spec_from_file_location("bench_mutants", ROOT / "bench" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


mutants = _load_mutants()


def test_at_least_fifteen_mutants_with_unique_names_in_known_categories():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) >= 15
    assert len(set(names)) == len(names)
    assert {m.category for m in mutants.MUTANTS} <= set(mutants.CATEGORIES)
    assert all(m.why.strip() and "\n" not in m.why for m in mutants.MUTANTS)
    assert set(mutants.QUICK) <= set(names)


@pytest.mark.parametrize("m", mutants.MUTANTS, ids=lambda m: m.name)
def test_mutant_text_occurs_exactly_once_and_the_result_compiles(m):
    text = (ROOT / m.file).read_text()
    assert text.count(m.find) == 1, (
        f"{m.name}: {m.file} holds its text {text.count(m.find)} times; update bench/mutants.py")
    mutated = m.apply(text)
    assert mutated != text
    compile(mutated, m.file, "exec")


def test_apply_refuses_text_that_is_not_there_once():
    m = mutants.Mutant("x", "f.py", "a = 1\n", "a = 2\n", "why", "allocation")
    assert m.apply("a = 1\n") == "a = 2\n"
    for text in ("", "a = 1\na = 1\n"):
        with pytest.raises(ValueError, match="not once"):
            m.apply(text)


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_detection",
                                                  ROOT / "bench" / "bench_detection.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    mod = _load_bench()
    pristine = tmp_path_factory.mktemp("pristine")
    mod.snapshot(pristine)
    return mod, pristine


def test_the_daemon_a_mutant_target_starts_imports_the_planted_copy(bench, tmp_path):
    from cnikit.targets import load_target

    mod, pristine = bench
    m = mutants.BY_NAME["startup-from-imds"]
    mod.make_copy(pristine, tmp_path, m)
    assert m.replace in (tmp_path / m.file).read_text()
    assert m.find not in (tmp_path / m.file).read_text()
    assert m.find in (pristine / m.file).read_text()  # the snapshot stays unmodified
    assert mod.copy_is_imported(tmp_path, pristine, m) is None
    t = load_target(mod.write_target(tmp_path, pristine, "mutant-x"))
    assert t.daemon.env["PYTHONPATH"].split(":") == [str(tmp_path), str(pristine)]
    assert t.daemon.command[1:4] == ("-P", "-m", "cnikit.cli")  # no cwd ahead of the copy


def test_a_copy_that_does_not_import_is_an_error_not_a_catch(bench, tmp_path):
    mod, pristine = bench
    broken = mutants.Mutant("broken", "cnikit/daemon/pool.py", "PREFIX_SIZE = 16",
                            "PREFIX_SIZE = (", "why", "allocation")
    mod.make_copy(pristine, tmp_path, broken)
    assert "does not import" in mod.copy_is_imported(tmp_path, pristine, broken)
    assert mod.judge({"runs": [{"scenario": "a", "verdict": "error"},
                               {"scenario": "b", "verdict": "holds"}], "fatal": None}) == ("error", [])
    assert mod.judge({"runs": [{"scenario": "a", "verdict": "inconclusive"}],
                      "fatal": None}) == ("escaped", [])
    assert mod.judge({"runs": [{"scenario": "a", "verdict": "error"},
                               {"scenario": "b", "verdict": "violation"}],
                      "fatal": None}) == ("caught", ["b"])


def test_a_certified_mutant_is_flagged_only_by_waste_its_baseline_run_did_not_show():
    """Cost findings (cnikit.check.cost) count for a mutant that certified when the
    unmodified daemon's run of the same scenario and seed had none of that kind."""
    mod = _load_bench()
    refused = {"kind": "refused-over-limit", "what": "EC2 refused 82 ..."}
    churn = {"kind": "eni-churn", "what": "n0 freed 1 ENI(s) no pod used ..."}
    base = {"outcome": "escaped", "cost": {"describe-lag-churn seed 1": [refused]}}

    def row(cost, outcome="escaped"):
        return {"name": "m", "outcome": outcome, "cost": cost}

    same = row({"describe-lag-churn seed 1": [refused]})
    mod.flag(same, base)
    assert same["outcome"] == "escaped"  # the reference daemon wastes as much there
    elsewhere = row({"describe-lag-churn seed 1": [refused], "new-eni-addresses-lag seed 1":
                     [refused], "crash-in-checkpoint-write seed 1": [churn]})
    mod.flag(elsewhere, base)
    assert elsewhere["outcome"] == "flagged"
    assert sorted(elsewhere["flagged_by"]) == ["crash-in-checkpoint-write seed 1",
                                               "new-eni-addresses-lag seed 1"]
    caught = row({"new-eni-addresses-lag seed 1": [refused]}, outcome="caught")
    mod.flag(caught, base)
    assert caught["outcome"] == "caught" and "flagged_by" not in caught


def test_an_ipv6_mutant_is_certified_as_an_ipv6_build_and_the_baseline_in_every_family(
        bench, tmp_path):
    """A bug of the daemon's IPv6 mode shows only when the daemon runs in it: its target
    declares ip_family ipv6 (the IPv6 scenarios, ENABLE_IPv6=true); the unmodified daemon
    runs every family the mutants do."""
    from cnikit.targets import load_target

    mod, pristine = bench
    v6 = [m for m in mutants.MUTANTS if m.category == mutants.IPV6]
    v4 = mutants.BY_NAME["startup-from-imds"]
    assert len(v6) >= 4
    assert {mod.family_of(m) for m in v6} == {"ipv6"} and mod.family_of(v4) == "ipv4"
    assert mod.baseline_family(v6) == "ipv6"
    assert mod.baseline_family([v4]) == "ipv4"
    assert mod.baseline_family([v4, *v6]) == "dual"
    mod.make_copy(pristine, tmp_path, v6[0])
    t = load_target(mod.write_target(tmp_path, pristine, "mutant-v6", mod.family_of(v6[0])))
    assert t.ip_family == "ipv6" and t.families == ("ipv6",)
