"""What a daemon container is, whatever the engine: its spec (ContainerSpec), the
capabilities and security options it gets instead of --privileged, and what both engines'
operations share (cnikit.containers.docker_api's Docker, cnikit.containers.podman_ops's
PodmanCli: run_container, kill, exit_code, remove, logs, ensure_image,
remove_dead_containers)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from cnikit.errors import EnvironmentProblem

# What the daemon container is given instead of --privileged, for every engine. A privileged
# container asks for every capability, and runc refuses to start one on a machine whose
# bounding set lacks any ("unable to apply caps"), as some VMs and CI runners do.
#   NET_ADMIN  links, addresses, routes, neighbours in the node and pod namespaces (veths)
#   SYS_ADMIN  setns() into the node's namespace (Docker's entry) and the pods' namespaces
#   NET_RAW    upstream's aws-node DaemonSet grants it with NET_ADMIN: a vendor's image gets
#              what it has in production (the reference daemon opens no raw socket)
CAPABILITIES = ("NET_ADMIN", "SYS_ADMIN", "NET_RAW")
#   seccomp    the default profile refuses setns/unshare/mount for some flag combinations
#   apparmor   docker-default denies mounts and writes under /proc/sys where AppArmor runs
#   label      SELinux labels would hide the host's /run/netns and state dir where it runs
SECURITY_OPTS = ("seccomp=unconfined", "apparmor=unconfined", "label=disable")


@dataclass(frozen=True)
class ContainerSpec:
    """One daemon container, as the Engine API takes it (ContainerDaemon.command() renders
    the same for the podman CLI)."""

    name: str
    image: str
    env: dict[str, str]
    labels: dict[str, str]
    binds: list[tuple[str, str, str]]  # (host path, container path, mode or "")
    network: str  # "none", or podman's "ns:PATH"
    entrypoint: list[str] | None
    command: list[str]


def remove_retrying(rm, wait, attempts: int = 5) -> None:
    """rm() (raising EnvironmentProblem on failure) until it succeeds. podman refuses a
    forced rm while a container whose process has just exited is still "stopped" (its
    cleanup running), through its API and its CLI alike (under load a run's daemon container
    was once left behind): wait() for that to end, then again."""
    for attempt in range(attempts):
        try:
            rm()
            return
        except EnvironmentProblem:
            if attempt == attempts - 1:
                raise
        with contextlib.suppress(Exception):
            wait()
        time.sleep(0.05 * (attempt + 1))
