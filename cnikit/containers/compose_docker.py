"""Run compose/docker-compose.yml under a Docker Engine with Debian's docker-compose 1.29
(Compose v1, package docker-compose) and local stand-in images, as compose_local does with
podman-compose.

    DOCKER_HOST=unix:///... python -m cnikit.containers.compose_docker [--keep]
    make compose-docker        (starts a private engine: cnikit.containers.dockerd)

The file as a Docker user runs it, with what Compose v1 needs: its top-level `name:` is a
Compose v2 key that v1 rejects, so a copy without it is used with `-p cnikit` and the
compose directory as the project directory (relative paths unchanged). The images no
registry can deliver are built into the engine (cnikit.containers.stack_images) and named
through CNIKIT_IMAGE and LOCALSTACK_IMAGE; the published ports are free ones, through
CNIKIT_GATE_PORT, CNIKIT_IMDS_PORT and CNIKIT_IMDS_CONTROL_PORT. The scenario container's
exit code is the verdict. Exit 0 when it is what the profile expects and the other services
are still up, 1 otherwise, 2 when it cannot run; always `docker-compose down -v` at the end
(unless --keep).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cnikit.containers.compose_local import (
    COMPOSE_FILE,
    PROJECT,
    ROOT,
    options,
    run_stack,
    wait_exited,
)
from cnikit.errors import CnikitError, EnvironmentProblem


def log(msg: str) -> None:
    print(f"compose-docker: {msg}", file=sys.stderr, flush=True)


def docker_compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        raise EnvironmentProblem("docker-compose is not installed (make setup installs it: "
                                 "apt package docker-compose)")
    return exe


def v1_file(dst: Path) -> Path:
    """The Compose file without its top-level `name:` (Compose v1 rejects the key)."""
    lines = COMPOSE_FILE.read_text().splitlines(keepends=True)
    dst.write_text("".join(line for line in lines if not line.startswith("name:")))
    return dst


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DockerStack:
    def __init__(self, env: dict[str, str], workdir: Path):
        from cnikit.containers.docker_api import Docker

        self.docker = Docker().require()
        self.exe = docker_compose()
        self.file = v1_file(workdir / "docker-compose.v1.yml")
        self.env = {**os.environ, **env}

    def compose(self, *args: str, check: bool = True, timeout: float = 600):
        p = subprocess.run([self.exe, "--no-ansi", "-p", PROJECT, "-f", str(self.file),
                            "--project-directory", str(COMPOSE_FILE.parent), *args],
                           env=self.env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if check and p.returncode != 0:
            lines = p.stderr.strip().splitlines() or [str(p.returncode)]
            last = next((ln for ln in lines if "ERROR" in ln), lines[-1])
            raise EnvironmentProblem(f"docker-compose {args[0]}: {last}")
        return p

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"  # Compose v1's naming

    def state(self, service: str) -> dict:
        return (self.docker.inspect(self.container(service)) or {}).get("State") or {}

    def wait_exit(self, service: str, timeout: float) -> int:
        return wait_exited(self.state, service, timeout, ("exited", "dead"))

    def logs(self, service: str, tail: int = 20) -> str:
        out = self.docker.call("logs", self.docker.client.api.logs, self.container(service),
                               tail=tail, missing=b"")
        return out.decode(errors="replace")

    def left(self) -> list[str]:
        rows = self.docker.client.api.containers(
            all=True, filters={"label": f"com.docker.compose.project={PROJECT}"})
        return [r["Names"][0].lstrip("/") for r in rows if r.get("Names")]

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", check=False)


def main(argv: list[str] | None = None) -> int:
    args, profile, scenario = options("compose-docker", argv)
    try:
        if os.geteuid() != 0:
            raise EnvironmentProblem("compose-docker needs root (node containers make namespaces)")
        from cnikit.containers.docker_api import Docker
        from cnikit.containers.stack_images import kit_image, localstack_image

        docker = Docker().require()
        t0 = time.monotonic()
        env = {"CNIKIT_IMAGE": kit_image(docker, log=log),
               "LOCALSTACK_IMAGE": localstack_image(docker, log=log),
               "CNIKIT_PROFILE": profile, "CNIKIT_SCENARIO": scenario,
               "CNIKIT_GATE_PORT": str(free_port()), "CNIKIT_IMDS_PORT": str(free_port()),
               "CNIKIT_IMDS_CONTROL_PORT": str(free_port())}
        log(f"images ready in {time.monotonic() - t0:.0f}s: {env['CNIKIT_IMAGE']}, "
            f"{env['LOCALSTACK_IMAGE']}")
        (ROOT / "reports" / "compose").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="cnikit-compose-") as work:
            return run_stack(DockerStack(env, Path(work)), profile, scenario, args, log)
    except CnikitError as e:
        print(f"compose-docker: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
