"""The pytest plugin without root: the options are registered, and a session that collected
tests needing namespaces stops with the reason before starting anything, unless they are
deselected (`-m "not root"`). Run as root, the inner pytest runs in a user namespace
(`unshare -U`), where the effective uid is not 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INNER = '''
import time

T0 = time.monotonic()

def test_cluster(cluster):
    pass

def test_invariants(invariants):
    pass

def test_nothing_started():
    # The two tests above were left out before their fixtures started an EC2.
    assert time.monotonic() - T0 < 5
'''


def run_unprivileged(args: list[str], cwd) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) to drop root for this test")
        cmd = ["unshare", "-U", *cmd]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_tests_needing_root_stop_a_session_without_root_in_one_line(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    p = run_unprivileged(["-q", "test_inner.py"], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == pytest.ExitCode.USAGE_ERROR, out
    said = [line for line in out.splitlines() if "need root" in line]
    assert len(said) == 1, out
    assert "2 of the 3 collected tests need root" in said[0]
    assert "-m 'not root'" in said[0]
    assert "Traceback" not in out and "passed" not in out


def test_a_marked_test_needs_root_too(tmp_path):
    (tmp_path / "test_inner.py").write_text(
        "import pytest\n\n@pytest.mark.root\ndef test_x():\n    pass\n")
    p = run_unprivileged(["-q", "test_inner.py"], tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR, p.stdout + p.stderr
    assert "1 of the 1 collected tests need root" in p.stdout + p.stderr


def test_deselecting_root_tests_runs_the_rest(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    p = run_unprivileged(["-q", "-m", "not root", "test_inner.py"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 2 deselected" in p.stdout


@pytest.mark.slow
def test_the_unit_tests_need_no_root():
    """`make unit` runs without root: no unit test is marked root or uses a root fixture."""
    root = Path(__file__).resolve().parents[2]
    p = run_unprivileged(["--collect-only", "-q", "-m", "root", "tests/unit"], root)
    assert p.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, p.stdout + p.stderr


@pytest.mark.slow
def test_xdist_workers_stop_the_session_with_the_reason(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    p = run_unprivileged(["-q", "-n", "2", "test_inner.py"], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode not in (0, pytest.ExitCode.INTERNAL_ERROR), out
    assert "2 of the 3 collected tests need root" in out
    assert "INTERNALERROR" not in out and "passed" not in out


@pytest.mark.slow
def test_options_show_in_the_header_and_help(tmp_path):
    (tmp_path / "test_inner.py").write_text("def test_x():\n    pass\n")
    p = run_unprivileged(["-q", "--cnikit-profile", "vpc-cni-1.18.3", "--cnikit-ec2", "localstack",
                          "--cnikit-report", str(tmp_path / "r"), "-v", "test_inner.py"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"cnikit: profile=vpc-cni-1.18.3 ec2=localstack reports={tmp_path / 'r'}" in p.stdout
    p = run_unprivileged(["--cnikit-profile", "vpc-cni-9"], tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR
    assert "invalid choice: 'vpc-cni-9'" in p.stderr
    p = run_unprivileged(["--cnikit-ec2", "aws"], tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR
    assert "invalid choice: 'aws'" in p.stderr


def test_target_option_names_the_build_or_refuses_a_bad_file_in_one_line(tmp_path):
    from cnikit.certify import template

    (tmp_path / "test_inner.py").write_text("def test_x():\n    pass\n")
    good = template.write(tmp_path / "mine.toml")
    p = run_unprivileged(["-q", "-v", "--cnikit-target", str(good), "test_inner.py"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cnikit: target=cnikit-reference " in p.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text() + "\nsurprise = 1\n")
    p = run_unprivileged(["--cnikit-target", str(bad), "test_inner.py"], tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR, p.stdout + p.stderr
    assert "--cnikit-target" in p.stderr and "surprise" in p.stderr
    assert "Traceback" not in p.stderr


def test_shard_option_splits_the_tests_disjointly_and_completely(tmp_path):
    (tmp_path / "test_inner.py").write_text(
        "".join(f"def test_{i}():\n    pass\n\n" for i in range(7)))
    ran = []
    for i in (1, 2, 3):
        p = run_unprivileged(["-v", "--cnikit-shard", f"{i}/3", "test_inner.py"], tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        ran.append({line.split("::")[1].split()[0] for line in p.stdout.splitlines()
                    if "::test_" in line and "PASSED" in line})
    assert sorted(x for part in ran for x in part) == sorted(f"test_{i}" for i in range(7))
    assert all(ran)
    p = run_unprivileged(["--cnikit-shard", "4/3", "test_inner.py"], tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR and "--cnikit-shard" in p.stderr
