"""The scenario CLI without a cluster: listing, bad usage (exit 2, one line), schedules."""

from __future__ import annotations

import contextlib
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


def path_without(tmp_path, *missing: str) -> str:
    """A PATH with every program of this one except `missing`, as on a machine without them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                if entry.name not in missing and not (bin_dir / entry.name).exists():
                    os.symlink(entry.path, bin_dir / entry.name)
    return str(bin_dir)


@pytest.mark.parametrize("argv,missing,env", [
    (["run", "imds-outage"], "nsenter", {}),
    (["up"], "nsenter", {}),
    (["matrix", "-s", "imds-outage"], "nsenter", {}),
    (["up"], "podman", {"CNIKIT_RUNTIME": "podman"}),
])
def test_a_missing_program_is_one_line_exit_2_before_anything_starts(tmp_path, argv, missing, env):
    from cnikit.runtime import PACKAGES

    run_root = tmp_path / "run"
    r = subprocess.run(CNIKIT + argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**os.environ, **env, "PATH": path_without(tmp_path, missing),
                            "CNIKIT_RUN_ROOT": str(run_root)})
    assert r.returncode == 2, (r.stdout, r.stderr[-4000:])
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    (line,) = r.stderr.strip().splitlines()
    assert f"'{missing}'" in line and PACKAGES[missing] in line, line
    assert not run_root.exists()  # no run was claimed: nothing started


def test_every_command_tool_names_its_package():
    from cnikit.cli import COMMANDS
    from cnikit.runtime import COMMAND_TOOLS, PACKAGES, RUNTIME_TOOLS

    assert set(COMMAND_TOOLS) <= set(COMMANDS)
    tools = {t for ts in [*COMMAND_TOOLS.values(), *RUNTIME_TOOLS.values()] for t in ts}
    assert tools <= set(PACKAGES)


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
