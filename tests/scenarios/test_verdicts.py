"""Verdicts on builds the kit did not write, observed from outside only: a build that makes no
progress is a liveness violation (exit 1), a design feature it lacks is a branch the scenario
takes (said so), what cannot be set up is inconclusive, and a plugin-only build that hands
out addresses EC2 never gave is caught by the invariants (ip-not-owned, unreachable)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cnikit import scenarios
from tests.too_slow import skip_if_run_too_slow

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

PLUGIN = shutil.which("cnikit-cni") or str(Path(sys.executable).parent / "cnikit-cni")
DAEMON = [sys.executable, "-m", "cnikit.cli", "daemon", "--state-dir", "{state_dir}"]
CNI_DIR = Path("/usr/lib/cni")


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)  # strings and numbers: JSON's forms are TOML's here


def write_target(path: Path, command: list[str], env: dict | None = None,
                 ready: dict | None = None, binaries: list[str] | None = None,
                 conflist: dict | None = None) -> Path:
    ready = ready if ready is not None else {"socket": "{state_dir}/ipamd.sock", "timeout": 60}
    lines = [f'name = "{path.stem}"', 'version = "0.0.1"', "", "[daemon]",
             f"command = {_toml(command)}"]
    if env:
        lines.append(f"env = {_toml(env)}")
    if ready:
        lines.append(f"ready = {_toml(ready)}")
    conflist = conflist or {"cniVersion": "1.0.0", "name": "aws-cni", "plugins": [
        {"type": "cnikit-cni", "daemonSocket": "{state_dir}/ipamd.sock"}]}
    lines += ["", "[plugin]", f"binaries = {_toml(binaries or [PLUGIN])}",
              f"conflist = {_toml(conflist)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(name: str, target: Path, tmp_path: Path):
    r = scenarios.run(name, target=str(target), seed=1, report_dir=tmp_path / "report")
    print(f"{name} [{r.target}]: {r.verdict} in {r.seconds:.1f}s; error {r.error}; "
          f"precondition {r.precondition}")
    for line in r.evidence():
        print("  " + line)
    skip_if_run_too_slow(r, f"{name} [{r.target}]")
    return r


def test_a_daemon_that_never_becomes_ready_is_a_liveness_violation(tmp_path):
    target = write_target(tmp_path / "never-ready.toml", ["sleep", "600"],
                          ready={"socket": "{state_dir}/ipamd.sock", "timeout": 3})
    r = run("imds-outage", target, tmp_path)
    assert r.verdict == "violation", r.error
    [v] = r.violations
    assert v["kind"] == "liveness" and "never became ready" in v["what"]
    assert "not ready after 3s" in v["what"]  # the evidence: what the readiness check saw
    assert r.exercised and r.error is None


def test_a_pod_that_never_gets_an_ip_is_a_liveness_violation(tmp_path):
    """A plugin that cannot reach its daemon (its conflist names a socket nobody serves):
    every ADD fails, with no fault active; the evidence is the plugin's own error."""
    conflist = {"cniVersion": "1.0.0", "name": "aws-cni", "plugins": [
        {"type": "cnikit-cni", "daemonSocket": "{state_dir}/nobody.sock"}]}
    target = write_target(tmp_path / "no-ip.toml", DAEMON, conflist=conflist)
    r = run("imds-outage", target, tmp_path)
    assert r.verdict == "violation", r.error
    [v] = [v for v in r.violations if v["kind"] == "liveness"]
    assert "got no IP within" in v["what"] and "daemon is not running" in v["what"], v


# The reference daemon under a parent that SIGKILLs it a few seconds after it is ready (its
# `ready` marker: not a time from its start, which a busy machine may spend starting it)
# and then exits with its code: from the kit's side, a daemon that dies on its own.
DIES_AFTER_READY = [sys.executable, "-c", """
import os, subprocess, sys, time
daemon = subprocess.Popen(sys.argv[1:])
ready = os.path.join(os.environ["CNIKIT_STATE_DIR"], "ready")
while daemon.poll() is None and not os.path.exists(ready):
    time.sleep(0.05)
time.sleep(3)
daemon.kill()
sys.exit(128 + 9)
""", *DAEMON]


def test_a_daemon_that_exits_by_itself_is_a_liveness_violation(tmp_path):
    target = write_target(tmp_path / "dies.toml", DIES_AFTER_READY)
    r = run("imds-outage", target, tmp_path)
    assert r.verdict == "violation", r.error
    live = [v for v in r.violations if v["kind"] == "liveness"]
    assert live and "exited by itself" in live[0]["what"], r.violations
    assert "exit code" in live[0]["what"]
    # The scenario stops once the build is caught stuck, rather than waiting out its steps.
    assert "IMDS back; reconcile" not in [s["title"] for s in r.steps], r.steps


def test_a_design_feature_the_build_lacks_is_a_branch_not_a_stop(tmp_path):
    """The reference daemon with a warm pool of 10 IPs (its own setting, over the scenario's
    WARM_IP_TARGET=1) is correct but never releases the IPs the scenario waits to see go
    back to EC2: the scenario goes on without them, judges the invariants and says so."""
    target = write_target(tmp_path / "big-pool.toml", DAEMON,
                          env={"CNIKIT_PROFILE": "hardened", "WARM_IP_TARGET": "10"})
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", "run", "restart-stale-imds",
                        "--target", str(target), "--report", str(tmp_path / "cli")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "HOLDS" in p.stdout and "adapted:" in p.stdout, p.stdout
    assert "released to EC2" in p.stdout, p.stdout
    doc = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert doc["verdict"] == "holds", doc["summary"]
    assert any("released to EC2" in a for a in doc["exposure"]["adapted"]), doc["exposure"]


def test_a_precondition_nothing_can_set_up_is_inconclusive(tmp_path):
    """What truly cannot be set up (here a condition that never comes) ends the run
    inconclusive: not the build's fault, not the kit's error, and said why."""
    from cnikit.scenarios import engine

    def unmet(ctx):
        ctx.precondition(lambda: False, 1.0, "a condition no build meets")

    scenarios.get("imds-outage")  # loads the registry before the test's entry joins it
    engine.REGISTRY.add("test-unmet-precondition", engine.Scenario(
        "test-unmet-precondition", "a precondition nothing meets", unmet, nodes=1), by=__name__)
    try:
        r = run("test-unmet-precondition", write_target(tmp_path / "t.toml", DAEMON), tmp_path)
    finally:
        engine.REGISTRY.remove("test-unmet-precondition")
    assert r.verdict == "inconclusive", (r.error, r.violations)
    assert r.precondition and "a condition no build meets" in r.precondition
    assert r.error is None and not r.violations


@pytest.mark.skipif(not (CNI_DIR / "ptp").exists(), reason="containernetworking-plugins missing")
def test_a_plugin_only_build_is_caught_and_its_warm_pool_never_comes(tmp_path):
    """ptp + host-local hand out addresses of the subnet that EC2 never assigned: the
    invariants catch it (a violation wins over the unmet warm-pool precondition)."""
    conflist = {"cniVersion": "1.0.0", "name": "ptp", "plugins": [{
        "type": "ptp", "ipMasq": False,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "{subnet_cidr}"}]],
                 "dataDir": "{state_dir}/host-local"}}]}
    target = write_target(tmp_path / "ptp.toml", ["sleep", "infinity"], ready={},
                          binaries=[str(CNI_DIR / "ptp"), str(CNI_DIR / "host-local")],
                          conflist=conflist)
    r = run("imds-stale-equal-length", target, tmp_path)
    assert r.verdict == "violation"
    assert "ip-not-owned" in {v["kind"] for v in r.violations}
    # Its missing warm pool was a branch the scenario took, not a stop.
    assert any("warm pool" in a for a in r.exposure["adapted"]), r.exposure
