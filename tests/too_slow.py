"""A run or a certification the machine was too slow for is skipped with its reason, never
judged: a run is then inconclusive with `too_slow` (docs/scenarios.md, "Too slow for the time
scale"), and `cnikit certify` exits 3 (INSUFFICIENT) and names the runs (docs/certify.md, "Why
a single run that was too slow"). The quiet machine's verdict is what the tests assert."""

from __future__ import annotations

import subprocess

import pytest


def skip_if_too_slow(p: subprocess.CompletedProcess) -> None:
    if p.returncode == 3 and "too slow for the time scale" in p.stdout:
        pytest.skip(next(line for line in p.stdout.splitlines()
                         if line.startswith("insufficient:")))


def skip_if_run_too_slow(r, label: str) -> None:
    """Skip a test whose scenario run (a RunResult) the machine was too slow for."""
    if r.too_slow:
        pytest.skip(f"{label}: {r.too_slow}")
