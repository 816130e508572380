"""`cnikit certify` on a foreign design: prefixd (tests/builds/prefix_daemon), a daemon that
holds /28 prefixes on the primary ENI with no warm pool, and its IPAM plugin under Debian's
ptp. The correct variant certifies on daemon-crash-churn (SIGKILLs mid-ADD: its checkpoint
must bring every allocation back, none lost or handed twice); the one that answers a
repeated ADD with the same address fails runtime-retries at once, by the sandbox's CHECK,
whether or not a new pod gets the address ptp's rollback freed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

PTP = Path("/usr/lib/cni/ptp")
BUILD = Path(__file__).resolve().parents[1] / "builds" / "prefix_daemon"


@pytest.mark.skipif(not PTP.exists(),
                    reason="Debian's containernetworking-plugins is not installed (make setup)")
@pytest.mark.timeout(660)
def test_prefix_daemon_certifies_daemon_crash_churn(tmp_path):
    out = tmp_path / "out"
    # A bound for a hung run, not a slow one (a busy CI runs scenarios 3-10x slower).
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "certify",
                        str(BUILD / "prefix-daemon.toml"), "--scenario", "daemon-crash-churn",
                        "--report", str(out)], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "certified", cert["runs"]


@pytest.mark.skipif(not PTP.exists(),
                    reason="Debian's containernetworking-plugins is not installed (make setup)")
@pytest.mark.timeout(660)
def test_a_repeated_add_that_frees_the_live_pods_address_fails_by_its_check(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "certify",
                        str(BUILD / "prefix-daemon-repeated-add.toml"), "--scenario",
                        "runtime-retries", "--report", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stdout + p.stderr
    [run] = json.loads((out / "certificate.json").read_text())["runs"]
    assert run["verdict"] == "violation", run
    checks = [line for line in run["evidence"] if " runtime-retry: " in line
              and "passed before its ADD was repeated" in line]
    assert checks, run["evidence"]
