"""Running a target on one node: its plugin installed into the node's CNI directories, its
daemon in the node's network namespace (a command, or an image in a container).

Every daemon is a cnikit.daemon.handle.DaemonHandle (the process or the container runtime)
ready by the target's own readiness (TargetReadiness). The state directory outlives
restarts (like a DaemonSet's host path); a command runs in a process group of its own, so a
kill reaches whatever it forked.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cnikit.containers.noderuntime import ContainerDaemon
from cnikit.daemon.process import ChildProcess
from cnikit.errors import UsageError
from cnikit.targets.model import ReadySpec, Target, render


@dataclass(frozen=True)
class NodePlaces:
    """What a target's placeholders stand for on one node."""

    state_dir: Path
    node: str
    node_index: int
    instance_id: str
    subnet_cidr: str
    vpc_cidr: str
    cni_bin_dir: Path
    cni_conf_dir: Path
    # Where the node reaches EC2 and the IMDS, and the region: what a plugin that calls
    # EC2 itself needs (its environment has them too, as AWS_ENDPOINT_URL_EC2 and so on).
    ec2_endpoint: str = ""
    imds_endpoint: str = ""
    region: str = ""

    def values(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items()}

    def render(self, value):
        return render(value, self.values())


def install_plugin(target: Target, places: NodePlaces) -> dict:
    """The plugin's binaries into the node's CNI bin dir, its conflist (rendered) into the
    conf dir, as a node's installer does. Returns the rendered conflist."""
    places.cni_bin_dir.mkdir(parents=True, exist_ok=True)
    places.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    if target.builtin:
        from cnikit.plugin.launcher import write_launcher

        for name in target.plugin.binaries:
            write_launcher(places.cni_bin_dir, name)  # the kit's plugin with a fast start-up
    else:
        for name, path in target.plugin.binaries.items():
            link = places.cni_bin_dir / name
            link.unlink(missing_ok=True)
            link.symlink_to(path)
    conf = places.render(target.plugin.conflist)
    (places.cni_conf_dir / f"10-{conf['name']}.conflist").write_text(json.dumps(conf, indent=1))
    return conf


def is_ready(ready: ReadySpec, netns: str | None) -> bool:
    """The socket accepts a connection / the URL answers 2xx, asked from inside the node's
    namespace (where 127.0.0.1 and abstract sockets, "@name", are the node's)."""
    from cnikit.fabric import netns as nsmod

    with nsmod.entered(netns) if netns else contextlib.nullcontext():
        if ready.socket:
            return _socket_answers(ready.socket)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(ready.url, timeout=1.0) as r:
                return 200 <= r.status < 300
        except (OSError, urllib.error.URLError, ValueError):
            return False


def _socket_answers(path: str) -> bool:
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(address)
        except OSError:
            return False
        # Say nothing and read to the end: closing at once would break the daemon's reply.
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
        return True


class TargetReadiness:
    """A daemon handle (cnikit.daemon.handle.DaemonHandle) ready by the target's [daemon]
    ready: its socket accepts a connection or its URL answers, within the target's timeout.
    No readiness declared: ready once started and still running. The kit's ready marker is
    the reference daemon's own: a target's state directory is left as it is."""

    ready: ReadySpec | None
    netns: str

    def ready_now(self) -> bool:
        return self.ready is None or is_ready(self.ready, self.netns)

    def wait_ready(self, timeout: float | None = None) -> None:
        super().wait_ready(self.ready.timeout if self.ready is not None else timeout)

    def _forget_ready(self) -> None:
        pass

    def _not_ready_message(self, timeout: float) -> str:
        return (f"{self.what} not ready after {timeout:.0f}s "
                f"({self.ready.socket or self.ready.url}): {self.tail()}")


class TargetProcess(TargetReadiness, ChildProcess):
    """A target's daemon command, entered into the node's network namespace."""

    ready_timeout = 60.0

    def __init__(self, argv: list[str], state_dir: str | os.PathLike, env: dict[str, str],
                 netns: str, ready: ReadySpec | None = None):
        self.argv = list(argv)
        self.state_dir = Path(state_dir)
        self.env = dict(env)
        self.netns = netns if "/" in netns else f"/run/netns/{netns}"
        self.ready = ready
        self.what = f"daemon {Path(self.argv[0]).name}"

    def command(self) -> list[str]:
        from cnikit.runtime import require_tool

        return [require_tool("nsenter"), f"--net={self.netns}", "--", *self.argv]

    def inner_command(self) -> list[str]:
        return self.argv

    def netns_path(self) -> str:
        return self.netns

    def program(self) -> str:
        return self.argv[0]


class TargetContainer(TargetReadiness, ContainerDaemon):
    """A target's daemon as a container joined to the node's namespace, ready by the
    target's own readiness (the kit's image when the target is built in)."""

    def __init__(self, engine, state_dir, env, netns, ready: ReadySpec | None, **kw):
        super().__init__(engine, state_dir, env=env, netns=netns, **kw)
        self.ready = ready


def check_runtime_for(target: Target, runtime: str) -> None:
    """A one-line UsageError when `runtime` cannot run this target's daemon."""
    if runtime not in ("process", "podman", "docker"):
        raise UsageError(f"runtime {runtime!r} is not one of process, podman, docker")
    if target.builtin or runtime == "process":
        return
    if target.daemon.command is not None:
        raise UsageError(f"target {target.name} runs a command, not an image: runtime {runtime} "
                         f"needs [daemon] image in {target.source}")
    if runtime == "docker":
        raise UsageError(f"target {target.name}: docker cannot join a node namespace by path "
                         "for a foreign image; use runtime podman")


def node_daemon(target: Target, places: NodePlaces, env: dict[str, str], netns: str,
                runtime: str = "process", run_id: str | None = None):
    """The daemon of `target` for one node: env is what the kit provides (the target's own
    env is added over it, placeholders rendered)."""
    check_runtime_for(target, runtime)
    spec = target.daemon
    env = {**env, **places.render(spec.env)}
    ready = ReadySpec(**places.render(spec.ready.__dict__)) if spec.ready else None
    if spec.image is None and (runtime == "process" or not target.builtin):
        return TargetProcess(places.render(list(spec.command)), places.state_dir, env, netns, ready)
    from cnikit.containers.noderuntime import Docker
    from cnikit.containers.podman import Podman

    engine = (Docker if runtime == "docker" else Podman)().require()
    if spec.image is None:  # a built-in in a container: the kit's own image
        return TargetContainer(engine, places.state_dir, env, netns, ready, run_id=run_id)
    args = places.render(list(spec.args)) if spec.args is not None else []
    return TargetContainer(engine, places.state_dir, env, netns, ready, run_id=run_id,
                           image=spec.image, args=args)
