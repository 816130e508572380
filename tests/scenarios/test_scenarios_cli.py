"""The scenario CLI without a cluster: listing, bad usage (exit 2, one line), schedules."""

from __future__ import annotations

import subprocess
import sys

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
    assert "Traceback" not in r.stderr


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
