"""The default `cnikit certify` on builds of other designs than the reference daemon's
(tests/builds/): each correct variant certifies, with at most one run in ten inconclusive;
each buggy variant fails on the violation its bug causes, found by the suite as it is, not
by a test written for the bug.

- ec2_per_pod: an IPAM plugin for ptp that asks EC2 for one address per pod, no daemon, no
  warm pool, no IMDS reads. Its bug (`release = "at-once"`): DEL gives the address back to
  EC2 at once, no IP cooldown (upstream 1091's class): early-reuse. Its IPv6 mode
  (`ip_family = "ipv6"`: one IPv6 address per pod) is certified on the IPv6 scenarios, the
  same bug failing there with early-reuse too.
- prefix_daemon: a daemon that holds /28 prefixes and hands out their addresses, no warm-IP
  logic. Its bug (`--reconcile trusts-imds`): a prefix missing from IMDS's ipv4-prefix is released with
  its pods (upstream 3824's class): their addresses are no longer the node's.
- operator_pool: a cluster operator (a `[[component]]`, the only EC2 caller) keeps each
  node's pool between watermarks in an OperatorNode resource of the run's object store;
  node agents hand it out and acknowledge release marks. Its bug (`--release stale-view`):
  the operator releases from its own stale copy of the in-use list without the agent's
  acknowledgement (cilium #13412's class): a pod's address is unassigned under it.

One certification per test, each its own unit for the suite's scheduler (tests/conftest.py):
`--seeds 1` (random-chaos once, like every other scenario), `--jobs 3`.
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

BUILDS = Path(__file__).resolve().parents[1] / "builds"
# target file -> the violation kinds its bug must show (none: it must certify)
CASES = {
    "ec2_per_pod/ec2-per-pod.toml": set(),
    "ec2_per_pod/ec2-per-pod-no-cooldown.toml": {"early-reuse"},
    "ec2_per_pod/ec2-per-pod-ipv6.toml": set(),
    "ec2_per_pod/ec2-per-pod-ipv6-no-cooldown.toml": {"early-reuse"},
    "prefix_daemon/prefix-daemon.toml": set(),
    "prefix_daemon/prefix-daemon-trusts-imds.toml": {"ip-not-owned", "unreachable", "shared-ip"},
    "operator_pool/operator-pool.toml": set(),
    "operator_pool/operator-pool-stale-view.toml": {"ip-not-owned", "unreachable", "shared-ip"},
}
# Not yet certified the same way five times running (the stale-view bug showed in 2 of 33
# runs of one certification): run with -m certify_new until they are.
NEW = {"operator_pool/operator-pool.toml", "operator_pool/operator-pool-stale-view.toml"}


def _kinds(run: dict) -> set[str]:
    """Violation kinds in a run's evidence lines ("+1.08s until +1.08s early-reuse: ...")."""
    return {line.split(":")[0].split()[-1] for line in run.get("evidence") or []}


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("target", [
    pytest.param(t, marks=pytest.mark.certify_new) if t in NEW else t for t in sorted(CASES)],
    ids=lambda t: Path(t).stem)
def test_default_certification_judges_what_the_build_does(target, tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "certify", str(BUILDS / target),
                        "--seeds", "1", "--jobs", "3", "--report", str(out)],
                       capture_output=True, text=True, timeout=1150)
    print(p.stdout)
    assert "Traceback" not in p.stderr, p.stderr
    skip_if_too_slow(p)
    cert = json.loads((out / "certificate.json").read_text())
    runs, s = cert["runs"], cert["summary"]
    assert s["error"] == 0, [(r["scenario"], r["error"]) for r in runs if r["error"]]
    assert s["inconclusive"] <= 0.1 * s["runs"], \
        [(r["scenario"], r["precondition"]) for r in runs if r["verdict"] == "inconclusive"]
    assert s["exposed"] >= 1
    want = CASES[target]
    if not want:
        bad = {r["scenario"]: r["evidence"] for r in runs if r["verdict"] == "violation"}
        assert (p.returncode, cert["verdict"]) == (0, "certified"), (p.stderr, bad)
        return
    assert (p.returncode, cert["verdict"]) == (1, "failed"), p.stderr
    found = set().union(*(_kinds(r) for r in runs if r["verdict"] == "violation"))
    assert found & want, (found, [r["evidence"] for r in runs if r["verdict"] == "violation"])
