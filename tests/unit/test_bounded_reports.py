"""A failure pytest cannot format still reaches the session as a failure (tests/bounded_reports.py):
without that plugin the worker crashes and the session ends in INTERNALERROR."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INNER = textwrap.dedent('''
    import pytest
    from _pytest.python import Function

    @pytest.fixture
    def formatting_crashes(monkeypatch):
        def crash(self, excinfo, style=None):
            raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")
        monkeypatch.setattr(Function, "repr_failure", crash)

    def test_unformattable(formatting_crashes):
        assert "x" * 100 == "y"

    def test_huge():
        assert "a" * 50000 == "b"

    def test_fine():
        pass
''')


@pytest.mark.parametrize("plugin", [True, False], ids=["bounded", "without"])
def test_an_unformattable_failure_is_reported_not_a_crash(plugin, tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_inner.py").write_text(INNER)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
            "test_inner.py"] + (["-p", "tests.bounded_reports"] if plugin else [])
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = p.stdout + p.stderr
    if not plugin:  # the crash this plugin exists for
        if "INTERNALERROR" not in out:
            pytest.skip("this pytest-xdist survives an unformattable failure by itself")
        return
    assert "INTERNALERROR" not in out and p.returncode == 1, out[-3000:]
    assert "2 failed, 1 passed" in out, out[-2000:]
    assert "pytest could not format this failure: SystemError" in out, out[-3000:]
    assert len(out) < 60_000
