"""`--runtime docker` without an engine names the fix: the same command under the kit's own
private engine, ready to paste; and a run's output says when its daemons ran in containers."""

from __future__ import annotations

import shlex
import subprocess
import sys

from cnikit.containers import dockerd
from cnikit.containers.options import runtime_params, runtime_used

MARK = "or run this command under the kit's private engine: "


def test_no_engine_names_the_private_engine_command(tmp_path):
    argv = [sys.executable, "-m", "cnikit.cli", "run", "imds-stale-equal-length",
            "--runtime", "docker", "--seed", "3"]
    host = f"unix://{tmp_path}/no-engine.sock"
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DOCKER_HOST": host})
    assert p.returncode == 2, p.stdout + p.stderr
    [line] = p.stderr.splitlines()
    assert line.startswith(f"cnikit: docker: no engine reachable at {host}: set DOCKER_HOST to one, ")
    why_not = dockerd.available()  # in a user's session, where dockerd is installed and root
    if why_not:
        assert line.endswith(f"the kit's private engine cannot start either: {why_not}")
        return
    assert MARK in line and line.endswith(" (docs/containers.md, Docker Engine)")
    command = shlex.split(line.split(MARK, 1)[1].rsplit(" (docs/", 1)[0])
    assert command == [sys.executable, "-m", "cnikit.containers.dockerd", "run", "--", *argv]


def test_a_run_says_which_runtime_and_engine_ran_its_daemons():
    assert runtime_used(runtime_params("process")) is None
    assert runtime_used({}) is None  # a run recorded before runtimes were
    assert runtime_used(runtime_params("podman")) == "runtime: the daemons ran in podman containers"
    assert runtime_used({"runtime": "docker", "engine": "unix:///run/e.sock"}) == \
        "runtime: the daemons ran in docker containers (engine at unix:///run/e.sock)"
