"""A report directory that cannot take files is refused before a run is spent on it: one
line, exit 2 (bad usage), from every command that writes reports and from the pytest plugin."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cnikit.errors import UsageError
from cnikit.report.outdir import writable_dir


def test_a_missing_directory_is_made_and_left_empty(tmp_path):
    out = writable_dir(tmp_path / "a" / "b")
    assert out.is_dir() and list(out.iterdir()) == []


def test_a_directory_under_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as e:
        writable_dir(tmp_path / "file" / "reports")
    assert str(e.value) == f"cannot write the report into {tmp_path / 'file' / 'reports'}: Not a directory"
    assert e.value.exit_code == 2


@pytest.mark.parametrize("argv", [
    ["run", "imds-stale-equal-length", "--report", "{bad}"],
    ["demo", "--report", "{bad}"],
    ["matrix", "-s", "imds-stale-equal-length", "--report", "{bad}"],
    ["certify", "hardened", "--report", "{bad}"],
    ["certify", "hardened", "--report", "{good}", "--junitxml", "{bad}/junit.xml"],
], ids=["run", "demo", "matrix", "certify", "certify-junitxml"])
def test_commands_refuse_an_unwritable_report_before_they_start(tmp_path, argv):
    (tmp_path / "file").write_text("")
    bad, good = tmp_path / "file" / "reports", tmp_path / "good"
    argv = [a.format(bad=bad, good=good) for a in argv]
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", *argv], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.splitlines() == [f"cnikit: cannot write {'the JUnit XML' if 'junit' in argv[-1] else 'the report'} into {bad}: Not a directory"], p.stderr
    assert p.stdout == ""  # no run began: nothing of one was printed


def test_the_pytest_plugin_refuses_an_unwritable_report_before_any_test(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "test_inner.py").write_text("def test_x():\n    pass\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "--cnikit-report", str(tmp_path / "file" / "r"), "test_inner.py"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == pytest.ExitCode.USAGE_ERROR, p.stdout + p.stderr
    assert "--cnikit-report: cannot write the report into" in p.stderr
    assert "passed" not in p.stdout
