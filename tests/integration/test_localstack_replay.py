"""The 3019 replay with LocalStack (its own venv, `make localstack`) as the EC2 upstream
behind the gate, through the real CLI: 1.18.3 shows the violation, hardened holds.
`make test` installs LocalStack first, so in CI this never skips."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cnikit.cloud.localstack import localstack_python

pytestmark = [
    pytest.mark.root,
    pytest.mark.localstack,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
    pytest.mark.skipif(localstack_python() is None,
                       reason="LocalStack is not installed: run `make localstack` (make test does)"),
]


# The first replay uses the LocalStack the session's LocalStack tests share (named with
# --ec2-endpoint); the second leaves it to the kit to start one of its own, as `--ec2
# localstack` does where none runs. Only one replay per LocalStack: a run's VPC has the
# same CIDR every time, and a second run would find the first one's leftovers there.
@pytest.mark.parametrize("profile,code,verdict,shared", [
    ("vpc-cni-1.18.3", 1, "violation", True), ("hardened", 0, "holds", False)])
def test_3019_replay_against_localstack(profile, code, verdict, shared, tmp_path, request):
    where = ["--ec2-endpoint", request.getfixturevalue("localstack_url")] if shared else []
    r = subprocess.run([sys.executable, "-m", "cnikit.cli", "run", "imds-stale-equal-length",
                        "--ec2", "localstack", *where, "--profile", profile,
                        "--report", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stdout + r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == verdict
    assert report["params"]["ec2"] == "localstack"
