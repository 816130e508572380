"""`cnikit certify` on builds the kit did not write, end to end (root, namespaces).

- the Go reference plugins ptp + host-local as a plugin-only target: host-local hands out
  addresses EC2 never assigned, so certification fails (exit 1) with ip-not-owned and
  unreachable evidence;
- the reference daemon as an external target file (its command line only): certify's
  files, exit code and JUnit on one scenario; the full per-profile verdicts run in
  tests/scenarios/test_matrix.py through the same target files;
- the same target with the daemon in a podman container (certified; upstream v1.18.3's
  violation in podman is tests/integration/test_runtime_podman.py's replay).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cnikit.certify import template

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

PTP = Path("/usr/lib/cni/ptp")
HOST_LOCAL = Path("/usr/lib/cni/host-local")

PTP_TARGET = """
name = "ptp-host-local"
version = "debian"

[daemon]
command = ["sleep", "infinity"]

[plugin]
binaries = ["{ptp}", "{host_local}"]
conflist = {{ cniVersion = "1.0.0", name = "ptp", plugins = [ {{ type = "ptp", ipMasq = false, ipam = {{ type = "host-local", ranges = [[ {{ subnet = "{{subnet_cidr}}" }} ]], dataDir = "{{state_dir}}/host-local" }} }} ] }}
"""


CERTIFY = [sys.executable, "-m", "cnikit.cli", "certify"]


def _certify(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([*CERTIFY, *args],
                       capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


@pytest.mark.skipif(not (PTP.exists() and HOST_LOCAL.exists()),
                    reason="Debian's containernetworking-plugins is not installed (make setup)")
@pytest.mark.timeout(300)
def test_ptp_host_local_fails_with_addresses_ec2_never_assigned(tmp_path):
    target = tmp_path / "ptp.toml"
    target.write_text(PTP_TARGET.format(ptp=PTP, host_local=HOST_LOCAL))
    out = tmp_path / "out"
    p = _certify(str(target), "--scenario", "daemon-crash-churn", "--report", str(out),
                 "--junitxml", str(tmp_path / "junit.xml"))
    assert p.returncode == 1, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "failed"
    kinds = {line.split(":")[0].split()[-1] for r in cert["runs"] for line in r["evidence"]}
    assert {"ip-not-owned", "unreachable"} <= kinds, cert["runs"]
    assert "ip-not-owned" in p.stdout and "unreachable" in p.stdout
    roles = {f["role"]: f for f in cert["files"]}
    assert any(f["path"] == str(PTP) for f in roles.values()), roles
    case = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite/testcase")
    assert case.get("classname") == "ptp-host-local" and case.find("failure") is not None


@pytest.mark.timeout(300)
def test_reference_daemon_target_file_certifies_one_scenario(tmp_path):
    target = template.write(tmp_path / "hardened.toml", profile="hardened")
    out = tmp_path / "out"
    p = _certify(str(target), "--scenario", "imds-stale-equal-length", "--report", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["verdict"] == "certified" and cert["summary"]["holds"] == 1
    assert cert["target"]["source"] == str(target) and not cert["target"]["builtin"]
    run = cert["runs"][0]
    assert (out / run["report"]).is_file()
    assert 'href="imds-stale-equal-length/seed1/report.html"' in (out / "report.html").read_text()


@pytest.mark.timeout(300)
def test_reference_daemon_target_file_1_18_3_fails_the_3019_replay(tmp_path):
    target = template.write(tmp_path / "old.toml", profile="vpc-cni-1.18.3")
    p = _certify(str(target), "--scenario", "imds-stale-equal-length", "--report",
                 str(tmp_path / "out"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "imds-stale-equal-length seed 1: violation" in p.stdout


@pytest.mark.timeout(600)
def test_reference_daemon_image_certifies_in_podman(tmp_path):
    """The reference daemon's image as a vendor's image target, each node's daemon in a
    podman container joined to the node: certified, with the image's digest on record."""
    from cnikit.containers.image import ensure_image
    from cnikit.containers.podman import Podman
    from tests.integration.test_targets import reference_target

    if Podman.available() is not None:
        pytest.skip(Podman.available())
    image = ensure_image(Podman())
    target = reference_target(tmp_path / "image.toml", f'image = "{image}"')
    out = tmp_path / "out"
    p = _certify(str(target), "--runtime", "podman", "--scenario", "imds-stale-equal-length",
                 "--scenario", "daemon-crash-churn", "--report", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["runtime"] == "podman" and cert["summary"]["holds"] == 2
    assert cert["target"]["image"] == image
    assert (cert["target"]["image_digest"] or "").startswith("sha256:")


@pytest.mark.timeout(600)
def test_jobs_and_shards_give_the_same_certification(tmp_path):
    """Two runs at once (--jobs 2), then the same plan as two shards merged: the same cells,
    the same verdicts, one exit code."""
    target = template.write(tmp_path / "hardened.toml", profile="hardened")
    # The two cheapest scenarios (about 8 s each): the cells, not the scenarios, are tested.
    only = ["--scenario", "ec2-swaps-warm-address", "--scenario", "restart-stale-imds"]
    p = _certify(str(target), *only, "--jobs", "2", "--report", str(tmp_path / "whole"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "in flight" in p.stderr
    whole = json.loads((tmp_path / "whole" / "certificate.json").read_text())
    assert whole["jobs"] == 2 and whole["summary"]["holds"] == 2
    assert len({r["run_id"] for r in whole["runs"]}) == 2, "each run has its own run id"
    # The shards run at once, as on two CI runners.
    shards = [subprocess.Popen([*CERTIFY, str(target), *only, "--shard", f"{i}/2", "--jobs", "1",
                                "--report", str(tmp_path / f"s{i}")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in (1, 2)]
    for shard in shards:
        out, err = shard.communicate(timeout=600)
        assert shard.returncode == 0 and "Traceback" not in err, out + err
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "report", "merge", str(tmp_path / "s1"),
                        str(tmp_path / "s2"), "--out", str(tmp_path / "merged")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    merged = json.loads((tmp_path / "merged" / "certificate.json").read_text())
    cells = lambda doc: {(r["scenario"], r["seed"]): r["verdict"] for r in doc["runs"]}  # noqa: E731
    assert cells(merged) == cells(whole)
