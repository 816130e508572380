"""The Compose file itself, run here by podman-compose with local stand-in images
(cnikit.containers.compose_local): LocalStack, the EC2 gate, fault-imds, a live `cnikit up`
node and the 3019 scenario, which must show the violation on vpc-cni-1.18.3 while the other
services stay up. Opt-in (CNIKIT_COMPOSE=1, or `make compose-podman`): it builds two images
(~2 min the first time) and runs the stack (~40 s)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cnikit.containers.podman import Podman

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (privileged containers)"),
    pytest.mark.skipif(Podman.available() is not None, reason=f"{Podman.available()}"),
    pytest.mark.skipif(os.environ.get("CNIKIT_COMPOSE") != "1",
                       reason="opt-in: CNIKIT_COMPOSE=1 (or make compose-podman), ~3 min"),
]


def test_compose_stack_runs_with_podman_compose():
    from cnikit.cloud.localstack import localstack_python

    if localstack_python() is None:
        pytest.skip("LocalStack is not installed: run `make localstack`")
    env = dict(os.environ, CNIKIT_PROFILE="vpc-cni-1.18.3", CNIKIT_SCENARIO="imds-stale-equal-length")
    p = subprocess.run([sys.executable, "-m", "cnikit.containers.compose_local"], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "VIOLATION (expected violation)" in p.stdout
    left = Podman().out("ps", "-a", "--filter", "label=io.podman.compose.project=cnikit",
                        "--format", "{{.Names}}")
    assert left == "", f"left behind: {left}"
