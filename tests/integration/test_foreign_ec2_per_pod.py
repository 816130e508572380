"""`cnikit certify` on a foreign-design build (tests/builds/ec2_per_pod): Debian's ptp with an
IPAM plugin that asks EC2 for one address per pod, no daemon and no warm pool.

- the correct variant (IP cooldown) certifies on scenarios that need no warm pool;
- the no-cooldown variant (upstream 1091's class) fails ip-reuse-cooldown with early-reuse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.too_slow import skip_if_too_slow

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
              pytest.mark.skipif(not Path("/usr/lib/cni/ptp").exists(),
                                 reason="Debian's containernetworking-plugins is not installed "
                                        "(make setup)")]

BUILD = Path(__file__).resolve().parents[1] / "builds" / "ec2_per_pod"


def _certify(target: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "certify", str(BUILD / target), *args],
                       capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    skip_if_too_slow(p)
    return p


@pytest.mark.timeout(600)
def test_per_pod_ipam_with_cooldown_certifies(tmp_path):
    out = tmp_path / "out"
    p = _certify("ec2-per-pod.toml", "--scenario", "daemon-crash-churn",
                 "--scenario", "ip-reuse-cooldown", "--report", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "certified", cert["runs"]
    assert cert["summary"]["holds"] == 2, cert["runs"]
    files = {f["path"] for f in cert["files"]}
    assert str(BUILD / "ec2-per-pod-ipam") in files, files


@pytest.mark.timeout(600)
def test_per_pod_ipam_without_cooldown_fails_early_reuse(tmp_path):
    out = tmp_path / "out"
    p = _certify("ec2-per-pod-no-cooldown.toml", "--scenario", "ip-reuse-cooldown",
                 "--report", str(out))
    assert p.returncode == 1, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "failed"
    assert any("early-reuse" in line for r in cert["runs"] for line in r["evidence"]), cert["runs"]
