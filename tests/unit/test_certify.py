"""cnikit certify without a cluster: the plan, certificate.json (schema and hashes), the JUnit
file, the index report, --init, and bad target files refused before anything starts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cnikit.certify import certificate, index, junit, template
from cnikit.certify.suite import Certification, plan


def _runs() -> list[dict]:
    base = {"expected": "holds", "seconds": 1.5, "exercised": True, "error": None,
            "evidence": [], "precondition": None, "run_id": "ab12c"}
    return [
        {**base, "scenario": "imds-outage", "seed": 1, "verdict": "holds",
         "report": "imds-outage/seed1/report.html"},
        {**base, "scenario": "imds-stale-equal-length", "seed": 1, "verdict": "violation",
         "report": "imds-stale-equal-length/seed1/report.html",
         "evidence": ["+6.08s unreachable: pod ck-ab12c-n0-p3 ip 10.0.1.16 (no answer)"]},
        {**base, "scenario": "ip-reuse-cooldown", "seed": 1, "verdict": "inconclusive",
         "report": None, "exercised": False, "precondition": "node 0's warm pool never reached 2"},
        {**base, "scenario": "random-chaos", "seed": 2, "verdict": "error", "report": None,
         "error": "the gate did not start"},
    ]


@pytest.fixture
def target_file(tmp_path) -> Path:
    return template.write(tmp_path / "ref.toml")


@pytest.fixture
def target(target_file):
    from cnikit.targets import resolve_target

    return resolve_target(str(target_file))


def _cert(target, runs) -> Certification:
    c = Certification(target, runs=runs, started=time.time() - 30, ended=time.time())
    c.document = certificate.build(c)
    return c


def test_plan_runs_every_scenario_once_and_chaos_per_seed():
    p = plan(["a", "random-chaos", "b"], seeds=3)
    assert [(x.scenario, x.seed) for x in p] == [
        ("a", 1), ("random-chaos", 1), ("random-chaos", 2), ("random-chaos", 3), ("b", 1)]


def test_verdict_and_exit_code_follow_the_worst_run(target):
    runs = _runs()
    assert _cert(target, runs).exit_code == 1  # a violation outranks an error
    assert _cert(target, [r for r in runs if r["verdict"] != "violation"]).exit_code == 2
    held = [r for r in runs if r["verdict"] == "holds"]
    c = _cert(target, held)
    assert (c.verdict, c.exit_code) == ("certified", 0)


def test_a_certificate_needs_runs_that_exercised_and_exposed_the_build(target):
    """CERTIFIED needs EXERCISED_BAR of the runs held or violated (not inconclusive) and one
    run whose faults reached the build: one inconclusive run of two, or every run held but
    none exposed, or no run at all, is INSUFFICIENT (exit 3)."""
    from cnikit.certify.suite import EXERCISED_BAR

    runs = _runs()
    holds, inconclusive = runs[0], runs[2]
    c = _cert(target, [holds, inconclusive])
    assert (c.verdict, c.exit_code) == ("insufficient", 3)
    unexposed = {**holds, "exposure": {"exposed": False, "faults": [], "adapted": ["x"]}}
    assert _cert(target, [unexposed] * 3).verdict == "insufficient"
    assert _cert(target, []).verdict == "insufficient"
    # Exactly at the bar: nine exercised runs of ten, one of them exposed.
    ten = [unexposed] * 8 + [holds, inconclusive]
    assert EXERCISED_BAR == 0.9 and _cert(target, ten).verdict == "certified"
    doc = _cert(target, ten).document["summary"]
    assert (doc["exposed"], doc["not_exposed"], doc["inconclusive"]) == (1, 8, 1)


def test_a_run_too_slow_for_its_time_scale_keeps_a_certificate_from_certified(target):
    """A busy machine may pass a build the quiet one fails (a race a scenario lost): one
    such run makes the certificate INSUFFICIENT, however many others held."""
    holds = _runs()[0]
    slow = {**holds, "verdict": "inconclusive", "exercised": False,
            "too_slow": "the machine was too slow for the time scale: no pod came ..."}
    c = _cert(target, [holds] * 19 + [slow])
    assert (c.verdict, c.exit_code) == ("insufficient", 3)
    assert c.document["summary"]["too_slow"] == 1
    assert _cert(target, [holds] * 19 + [{**slow, "verdict": "violation"}]).verdict == "failed"


def test_cost_findings_are_kept_and_shown_but_never_change_the_verdict(target, tmp_path):
    """Waste (cnikit.check.cost) is listed per run, counted in the summary and shown on the
    index page; a certificate whose runs held stays CERTIFIED with it."""
    jsonschema = pytest.importorskip("jsonschema")
    what = "EC2 refused 40 AssignPrivateIpAddresses calls on eni-1 with " \
           "PrivateIpAddressLimitExceeded in 5.0s"
    holds = {**_runs()[0], "cost": [{"kind": "refused-over-limit", "subject": "eni-1",
                                     "count": 40, "since": 1.0, "what": what}]}
    c = _cert(target, [holds, _runs()[0]])
    assert (c.verdict, c.document["summary"]["cost"]) == ("certified", 1)
    jsonschema.validate(json.loads(json.dumps(c.document)), certificate.SCHEMA)
    assert f"cost: refused-over-limit: {what}" in index.render(c.document)


def test_certificate_schema_and_hashes(target, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    c = _cert(target, _runs())
    path = certificate.write(tmp_path, c.document)
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, certificate.SCHEMA)
    assert doc["verdict"] == "failed"
    assert doc["target"]["name"] == "cnikit-reference"
    assert doc["summary"] == {"runs": 4, "exercised": 3, "exposed": 2, "not_exposed": 0,
                              "holds": 1, "violation": 1,
                              "inconclusive": 1, "error": 1, "too_slow": 0, "slowed": 0,
                              "cost": 0}
    assert doc["files"], "the files under test are named"
    for f in doc["files"]:
        assert f["sha256"] == hashlib.sha256(Path(f["path"]).read_bytes()).hexdigest(), f
    assert doc["kit"]["version"]
    assert doc["machine"]["cores"] == os.cpu_count()
    # The schema rejects what it must: a hash that is not one.
    bad = json.loads(json.dumps(doc))
    bad["files"][0]["sha256"] = "xyz"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, certificate.SCHEMA)


def test_junit_one_testcase_per_run_with_target_as_classname(target, tmp_path):
    c = _cert(target, _runs())
    root = ET.parse(junit.write(tmp_path / "j.xml", c.document)).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("errors") == "1" and suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert {x.get("classname") for x in cases} == {"cnikit-reference"}
    assert [x.get("name") for x in cases][1] == "imds-stale-equal-length[seed1]"
    assert "10.0.1.16" in cases[1].find("failure").get("message")
    assert "warm pool" in cases[2].find("skipped").get("message")
    props = {p.get("name"): p.get("value") for p in cases[0].find("properties")}
    assert props["seed"] == "1" and props["report"].endswith("report.html")


def test_index_links_every_run_and_says_the_verdict(target):
    html = index.render(_cert(target, _runs()).document)
    assert 'href="imds-outage/seed1/report.html"' in html
    assert "failed: an invariant was violated" in html
    assert "precondition not met: node 0&#x27;s warm pool never reached 2" in html


def test_init_writes_a_commented_target_that_loads(target_file):
    text = target_file.read_text()
    assert text.count("#") > 10, "the file explains itself"
    doc = tomllib.loads(text)
    assert Path(doc["daemon"]["command"][0]).is_file()
    assert doc["observe"] == {"introspection": 61679, "metrics": 61678}


def test_init_refuses_to_overwrite(target_file):
    from cnikit.errors import UsageError

    with pytest.raises(UsageError, match="exists"):
        template.write(target_file)


def _cnikit(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cnikit.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("mutate, key", [
    (lambda t: t.replace('name = "cnikit-reference"\n', ""), "name"),
    (lambda t: t + "\ncolour = \"blue\"\n", "colour"),
    (lambda t: t.replace("[plugin]", "[plugin]\nbogus = 1"), "bogus"),
    (lambda t: t.replace('"daemon", "--state-dir"', '"daemon" "--state-dir"'), None),
])
def test_bad_target_is_one_line_exit_2_and_nothing_started(target_file, mutate, key, tmp_path):
    target_file.write_text(mutate(target_file.read_text()))
    p = _cnikit("certify", str(target_file), "--report", str(tmp_path / "out"))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert str(target_file) in lines[0] or target_file.name in lines[0], lines[0]
    if key:
        assert key in lines[0], lines[0]
    assert not (tmp_path / "out").exists(), "nothing is written for a bad target"


def test_missing_plugin_binary_names_the_key(target_file, tmp_path):
    text = target_file.read_text()
    doc = tomllib.loads(text)
    text = text.replace(doc["plugin"]["binaries"][0], str(tmp_path / "no-such-plugin"))
    target_file.write_text(text)
    p = _cnikit("certify", str(target_file))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "binaries" in p.stderr and "no-such-plugin" in p.stderr


def test_certify_without_target_is_usage_error():
    p = _cnikit("certify")
    assert p.returncode == 2 and "--init" in p.stderr


# ---- shards and merge -------------------------------------------------------------------

def test_shards_are_disjoint_and_cover_the_plan():
    from cnikit.scenarios.parallel import parse_shard, take_shard

    p = plan(["a", "b", "c", "random-chaos"], seeds=4)
    parts = [take_shard(p, parse_shard(f"{i}/3")) for i in (1, 2, 3)]
    assert sorted(x.key for part in parts for x in part) == sorted(x.key for x in p)
    assert sum(len(x) for x in parts) == len(p)
    assert take_shard(p, None) == p
    assert take_shard(p, (2, 3)) == take_shard(p, (2, 3))  # deterministic


@pytest.mark.parametrize("bad", ["0/3", "4/3", "1-3", "x/y", "3"])
def test_bad_shard_is_one_line(bad):
    from cnikit.errors import UsageError
    from cnikit.scenarios.parallel import parse_shard

    with pytest.raises(UsageError, match="--shard"):
        parse_shard(bad)


def test_runs_at_once_default_to_at_most_ten_per_usable_core(monkeypatch):
    from cnikit.scenarios import parallel

    monkeypatch.setattr(parallel, "available_mb", lambda: 64 * 1024)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert parallel.default_jobs() == 30
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set())
    assert parallel.default_jobs() == 1
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(range(40)))
    assert parallel.default_jobs() == 64
    # No more than the available memory holds, and at least one whatever it says.
    monkeypatch.setattr(parallel, "available_mb", lambda: 3000)
    assert parallel.default_jobs() == 10
    monkeypatch.setattr(parallel, "available_mb", lambda: 100)
    assert parallel.default_jobs() == 1
    monkeypatch.setattr(parallel, "available_mb", lambda: None)
    assert parallel.default_jobs() == 64


def _shard_dirs(target, tmp_path, n: int) -> list[Path]:
    from cnikit.scenarios.parallel import take_shard

    dirs = []
    for i in range(1, n + 1):
        d = tmp_path / f"shard{i}"
        d.mkdir()
        runs = take_shard(_runs(), (i, n))
        c = _cert(target, runs)
        c.shard = (i, n)
        c.document = certificate.build(c)
        certificate.write(d, c.document)
        dirs.append(d)
    return dirs


def test_merged_shards_equal_the_unsharded_certification(target, tmp_path):
    from cnikit.certify.merge import merge

    whole = _cert(target, _runs()).document
    doc = merge(_shard_dirs(target, tmp_path, 3), tmp_path / "merged")
    key = lambda r: (r["scenario"], r["seed"])  # noqa: E731
    assert sorted(map(key, doc["runs"])) == sorted(map(key, whole["runs"]))
    assert {key(r): r["verdict"] for r in doc["runs"]} == {key(r): r["verdict"] for r in whole["runs"]}
    assert doc["verdict"] == whole["verdict"] and doc["summary"] == whole["summary"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads((tmp_path / "merged" / "certificate.json").read_text()),
                        certificate.SCHEMA)
    html = (tmp_path / "merged" / "report.html").read_text()
    assert 'href="../shard1/imds-outage/seed1/report.html"' in html
    suite = ET.parse(tmp_path / "merged" / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "4"


def test_merge_cli_exit_code_and_refusals(target, tmp_path):
    dirs = _shard_dirs(target, tmp_path, 2)
    p = _cnikit("report", "merge", *map(str, dirs), "--out", str(tmp_path / "m"))
    assert p.returncode == 1, p.stdout + p.stderr  # one shard holds the violation
    assert "4 runs from 2 shards" in p.stdout
    p = _cnikit("report", "merge", str(dirs[0]), str(dirs[0]), "--out", str(tmp_path / "m2"))
    assert p.returncode == 2 and "is in both" in p.stderr and len(p.stderr.splitlines()) == 1
    other = json.loads((dirs[1] / "certificate.json").read_text())
    other["files"][0]["sha256"] = "0" * 64
    (dirs[1] / "certificate.json").write_text(json.dumps(other))
    p = _cnikit("report", "merge", *map(str, dirs), "--out", str(tmp_path / "m3"))
    assert p.returncode == 2 and "another build" in p.stderr
    p = _cnikit("report", "merge", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m4"))
    assert p.returncode == 2 and p.stderr.strip() == f"cnikit: {tmp_path / 'nowhere'}: no such directory"


def test_merge_of_a_directory_without_shards_says_so_in_one_line(target, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _cnikit("report", "merge", str(empty), "--out", str(tmp_path / "m"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"no shards found in {empty}: it has no certificate.json" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "m").exists()  # nothing written
    # Shards one level down (an artifact download): the line names them.
    (tmp_path / "artifacts").mkdir()
    dirs = _shard_dirs(target, tmp_path / "artifacts", 2)
    p = _cnikit("report", "merge", str(tmp_path / "artifacts"), "--out", str(tmp_path / "m"))
    assert p.returncode == 2 and f"its subdirectories {dirs[0]} {dirs[1]} hold shards" in p.stderr
    # A certification shard and a matrix shard do not merge.
    (empty / "matrix.json").write_text("{}")
    p = _cnikit("report", "merge", str(dirs[0]), str(empty), "--out", str(tmp_path / "m"))
    assert p.returncode == 2 and "merge shards of one kind" in p.stderr, p.stderr
    assert not (tmp_path / "m").exists()
