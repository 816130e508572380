"""Node runtimes: how a node's CNI daemon runs.

    process   `cnikit daemon` as a child process entered into the node namespace
              (cnikit.daemon.process.DaemonProcess)
    podman    the daemon image in a podman container joined to the node namespace with
              `--network ns:/run/netns/<node>`
    docker    the same image through the Docker Engine API (the `docker` package, at
              DOCKER_HOST: a Docker engine, or podman's API service). Docker cannot join a
              namespace by path: the container starts with network `none` and its
              entrypoint enters the node namespace (setns) before it runs the daemon

All three are a cnikit.daemon.handle.DaemonHandle (start, wait until ready, kill, stop;
cnikit.containers.container_daemon.ContainerDaemon is the container runtimes' part of it).
The container shares the state directory as a volume at the same path, so the plugin on the
host finds the socket where the process runtime puts it, and ipam.json survives restarts
like a DaemonSet's host-path volume. Containers are never privileged: they get the
capabilities and security options in cnikit.containers.container_ops (CAPABILITIES,
SECURITY_OPTS; docs/containers.md says why each), and see /run/netns with slave
propagation, so pod namespaces made later appear inside. The engines: docker_api (the
Engine API), podman_ops (podman's CLI). This module picks the runtime.
"""

from __future__ import annotations

import os

from cnikit.containers.container_daemon import ContainerDaemon
from cnikit.containers.docker_api import Docker
from cnikit.containers.podman import Podman
from cnikit.daemon.process import DaemonProcess
from cnikit.errors import UsageError

RUNTIMES = ("process", "podman", "docker")
DEFAULT_RUNTIME = "process"


def check_runtime(name: str) -> str:
    """The runtime's name if it can run here; a one-line error (exit 2) otherwise."""
    if name not in RUNTIMES:
        raise UsageError(f"runtime {name!r} is not one of {', '.join(RUNTIMES)}")
    if name == "podman":
        Podman().require()
    elif name == "docker":
        Docker().require()
    return name


def make_daemon(runtime: str, state_dir: str | os.PathLike, env: dict[str, str],
                netns: str, name: str | None = None, run_id: str | None = None):
    """A daemon for one node under the named runtime (see the module docstring)."""
    if runtime == "process":
        return DaemonProcess(state_dir, env=env, netns=netns)
    engine = {"podman": Podman, "docker": Docker}.get(runtime)
    if engine is None:
        raise UsageError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")
    return ContainerDaemon(engine().require(), state_dir, env=env, netns=netns, name=name, run_id=run_id)
