"""The pytest plugin without root: the options are registered, and the fixtures that need
namespaces skip with the reason before starting anything. Run as root, the inner pytest runs
in a user namespace (`unshare -U`), where the effective uid is not 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

INNER = '''
import time

T0 = time.monotonic()

def test_cluster(cluster):
    pass

def test_invariants(invariants):
    pass

def test_nothing_started():
    # Skipping came first: no EC2 was started for the two tests above.
    assert time.monotonic() - T0 < 5
'''


def run_unprivileged(args: list[str], cwd) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) to drop root for this test")
        cmd = ["unshare", "-U", *cmd]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_root_fixtures_skip_with_the_reason_when_not_root(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    p = run_unprivileged(["-q", "-rs", "test_inner.py"], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "cnikit cluster needs root: network namespaces" in out
    assert "cnikit invariants need root: the prober enters pod namespaces" in out
    assert "1 passed, 2 skipped" in out


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
