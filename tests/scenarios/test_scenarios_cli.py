"""The scenario CLI without a cluster: listing, bad usage (exit 2, one line), schedules."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cnikit.scenarios.random_chaos import make_schedule

CNIKIT = [sys.executable, "-m", "cnikit.cli"]


def cli(*args):
    return subprocess.run(CNIKIT + list(args), capture_output=True, text=True, timeout=60)


def test_scenarios_lists_every_scenario_with_a_line():
    from cnikit import scenarios

    r = cli("scenarios")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == scenarios.names()
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)


def test_unknown_scenario_is_one_line_exit_2():
    r = cli("run", "no-such-scenario")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "unknown scenario" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr[-4000:]  # the whole traceback if any


def test_bad_profile_exit_2():
    r = cli("run", "imds-outage", "--profile", "vpc-cni-9")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_bad_duration_exit_2():
    r = cli("run", "random-chaos", "--duration", "-3")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_random_chaos_schedule_is_a_function_of_the_seed():
    a, b, c = make_schedule(7, 30), make_schedule(7, 30), make_schedule(8, 30)
    assert a == b and a != c
    assert all(op["at"] < 30 for op in a) and len(a) > 10
    kinds = {op["op"] for op in make_schedule(3, 120)}
    assert kinds == {"add", "delete", "imds", "ec2", "kill"}


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
@pytest.mark.timeout(120)
def test_run_violation_exit_1_with_evidence_and_report(tmp_path):
    r = subprocess.run(CNIKIT + ["run", "imds-stale-equal-length", "--profile", "vpc-cni-1.18.3",
                                 "--seed", "3", "--report", str(tmp_path / "rep")],
                       capture_output=True, text=True, timeout=110, cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
    assert "VIOLATION" in r.stdout
    assert any(k in r.stdout for k in ("ip-not-owned", "unreachable", "shared-ip")), r.stdout
    assert (tmp_path / "rep" / "report.json").exists()
    assert "Traceback" not in r.stderr, r.stderr[-4000:]  # the whole traceback if any
