"""The Compose file under a real Docker Engine (the session's private dockerd, the
`docker_engine` fixture) with Debian's docker-compose 1.29 (Compose v1; package
docker-compose) and local stand-in images built into that engine
(cnikit.containers.compose_docker): LocalStack, the EC2 gate, fault-imds, a live `cnikit up`
node and the 3019 scenario, which must show the violation on vpc-cni-1.18.3 while the other
services stay up; nothing of the project is left. About 40 s for the stack, plus the two
images the first time in a session (~2 min on 2 cores)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (node containers make namespaces)"),
]


# The stack's two images are built into the session's fresh engine first: ~5 min beside a
# busy suite on 2 cores (the subprocess's own bound is 900 s).
@pytest.mark.timeout(960)
def test_compose_stack_runs_under_docker_with_compose_v1(docker_engine):
    import shutil

    from cnikit.cloud.localstack import localstack_python
    from cnikit.containers.docker_api import Docker
    from tests.integration.conftest import docker_host

    if localstack_python() is None:
        pytest.skip("LocalStack is not installed: run `make localstack`")
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (make setup: apt package docker-compose)")
    env = dict(os.environ, DOCKER_HOST=docker_engine.url, CNIKIT_PROFILE="vpc-cni-1.18.3",
               CNIKIT_SCENARIO="imds-stale-equal-length")
    p = subprocess.run([sys.executable, "-m", "cnikit.containers.compose_docker"], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "VIOLATION (expected violation)" in p.stdout
    with docker_host(docker_engine.url):
        rows = Docker().client.api.containers(
            all=True, filters={"label": "com.docker.compose.project=cnikit"})
    assert rows == [], f"left behind: {[r['Names'] for r in rows]}"
