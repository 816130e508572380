"""The command lines a newcomer meets first, without a cluster: --version, --json listings,
shell completion, and bad input refused in one line (a negative seed, a misspelt scenario,
a run id that is none, LocalStack that is not there)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cnikit.cluster.cleanup_cli import _say_unknown
from cnikit.errors import CnikitError, UsageError
from cnikit.fabric.cleanup import Report
from cnikit.scenarios.cli.run import result_json
from cnikit.scenarios.engine.result import RunResult
from faultcore.version import checkout

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def cli(prog: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / prog), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def one_line_exit_2(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_version_names_the_commit_when_run_from_a_checkout():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    for prog in ("cnikit", "fault-imds"):
        r = cli(prog, "--version")
        assert r.returncode == 0 and r.stdout.startswith(f"{prog} 0."), r.stdout + r.stderr
        assert f"(git {head[:12]}" in r.stdout, r.stdout


def test_an_installed_copy_has_no_commit(tmp_path):
    """A package that is not a folder at the top of a work tree (a copy in a virtualenv that
    sits inside a checkout) says only its version: the checkout's commit is not its own."""
    nested = tmp_path / "venv" / "site-packages" / "cnikit"
    nested.mkdir(parents=True)
    assert checkout(nested) is None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert checkout(nested) is None
    assert checkout(ROOT / "cnikit") is not None or not (ROOT / ".git").exists()


def test_scenarios_json_is_every_scenario_with_its_line_and_expected_verdicts():
    from cnikit import scenarios

    r = cli("cnikit", "scenarios", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert list(listed) == scenarios.names()
    entry = listed["imds-stale-equal-length"]
    assert entry["description"] == scenarios.get("imds-stale-equal-length").description
    assert entry["expected"]["vpc-cni-1.18.3"] == "violation"


def test_run_json_is_the_runs_record_with_its_evidence():
    r = RunResult(scenario="imds-outage", description="", profile="hardened", seed=3,
                  verdict="violation", expected="holds", seconds=1.5, started=100.0,
                  target="hardened", report={"json": "reports/x/report.json"},
                  violations=[{"kind": "liveness", "since": 101.0, "subject": "pod-1",
                               "what": "no address"}])
    out = json.loads(json.dumps(result_json(r), default=str))
    assert (out["scenario"], out["seed"], out["verdict"], out["target"]) == (
        "imds-outage", 3, "violation", "hardened")
    assert out["evidence"] == ["+1.00s liveness: pod-1 (no address)"]
    assert out["report"] == "reports/x/report.json" and len(out["violations"]) == 1


def test_an_unknown_scenario_names_the_closest_one():
    err = one_line_exit_2(cli("cnikit", "run", "imds-outag"))
    assert "unknown scenario 'imds-outag'" in err and "did you mean 'imds-outage'?" in err


@pytest.mark.parametrize("argv", [
    ("cnikit", "run", "imds-outage", "--seed", "-1"),
    ("cnikit", "demo", "--seed", "-1"),
    ("cnikit", "ec2", "--seed", "-1"),
    ("fault-imds", "serve", "--ec2-endpoint", "http://127.0.0.1:9", "--seed", "-1"),
])
def test_a_negative_seed_is_refused_in_one_line(argv):
    # random.Random(-1) draws what seed 1 draws: accepted, it would be seed 1 renamed.
    assert "--seed must be 0 or more, got -1" in one_line_exit_2(cli(*argv))


def test_cleanup_of_a_run_id_that_is_none_or_unknown():
    assert "is not a run id" in one_line_exit_2(cli("cnikit", "cleanup", "--run", "UNKNOWN"))
    # A well-formed id that left nothing and is not running: said, exit 1 (not a clean 0).
    with pytest.raises(CnikitError) as e:
        _say_unknown({"zz9zz"}, Report(), [])
    assert e.value.exit_code == 1 and "no run zz9zz on this machine" in str(e.value)
    _say_unknown({"ab12c"}, Report(runs=["ab12c"]), [])
    _say_unknown({"ab12c"}, Report(), ["ck-ab12c-dnode1"])
    _say_unknown(None, Report(), [])


def test_localstack_that_is_neither_running_nor_installed_points_at_make_localstack(
        tmp_path, monkeypatch):
    from cnikit.cloud import Cloud

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{dead}")
    monkeypatch.setenv("CNIKIT_LOCALSTACK_VENV", str(tmp_path / "none"))
    with pytest.raises(UsageError, match="run `make localstack`"):
        Cloud.start(ec2="localstack")


def test_shell_completion_completes_commands_and_scenario_names():
    r = cli("cnikit", env={"_CNIKIT_COMPLETE": "bash_source"})
    assert r.returncode == 0 and "_cnikit_completion" in r.stdout, r.stderr
    r = cli("cnikit", env={"_CNIKIT_COMPLETE": "bash_complete", "COMP_WORDS": "cnikit run imds-o",
                           "COMP_CWORD": "2"})
    assert "plain,imds-outage" in r.stdout.splitlines(), r.stdout
