"""Running a target on one node: its plugin installed into the node's CNI directories, its
daemon in the node's network namespace (a command, or an image in a container).

Every daemon has the interface cnikit.fabric.topology.Node drives: start(wait),
wait_ready(timeout), alive(), kill(sig), stop(), restart(wait), pid, state_dir, socket_path,
on_start, starts, tail(). The state directory outlives restarts (like a DaemonSet's host
path); a command runs in a process group of its own, so a kill reaches whatever it forked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cnikit.containers.noderuntime import ContainerDaemon
from cnikit.daemon.process import ChildProcess, DaemonProcess
from cnikit.errors import DaemonNotReady as _KitDaemonNotReady
from cnikit.errors import EnvironmentProblem, UsageError
from cnikit.targets.model import ReadySpec, Target, render

READY_POLL = 0.02


class DaemonNotReady(_KitDaemonNotReady):
    """A target's daemon exited (exited=True) or did not become ready within its timeout."""

    def __init__(self, message: str, exited: bool):
        super().__init__(message)
        self.exited = exited


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


def wait_ready(daemon, ready: ReadySpec | None, netns: str | None, timeout: float, what: str) -> None:
    """Until the daemon is ready; DaemonNotReady when it exits or the time is up. No
    readiness declared: ready once started and still running."""
    if ready is not None:
        timeout = ready.timeout
    deadline = time.monotonic() + timeout
    while True:
        if not daemon.alive():
            raise DaemonNotReady(f"{what} exited: {daemon.tail()}", exited=True)
        if ready is None or is_ready(ready, netns):
            return
        if time.monotonic() >= deadline:
            raise DaemonNotReady(f"{what} not ready after {timeout:.0f}s "
                                 f"({ready.socket or ready.url}): {daemon.tail()}", exited=False)
        time.sleep(READY_POLL)


class TargetProcess(ChildProcess):
    """A target's daemon command, entered into the node's network namespace."""

    def __init__(self, argv: list[str], state_dir: str | os.PathLike, env: dict[str, str],
                 netns: str, ready: ReadySpec | None = None):
        self.argv = list(argv)
        self.state_dir = Path(state_dir)
        self.env = dict(env)
        self.netns = netns if "/" in netns else f"/run/netns/{netns}"
        self.ready = ready

    def command(self) -> list[str]:
        from cnikit.runtime import require_tool

        return [require_tool("nsenter"), f"--net={self.netns}", "--", *self.argv]

    def start(self, wait: float = 60.0) -> TargetProcess:
        if self.alive():
            return self
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "CNIKIT_STATE_DIR": str(self.state_dir)}
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            try:
                # nsenter execs the command: the pid is the daemon's, and so is the group.
                self.proc = subprocess.Popen(self.command(), env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
            except OSError as e:
                raise EnvironmentProblem(f"cannot start {self.argv[0]}: {e.strerror}") from None
        self.starts += 1
        if self.on_start is not None:
            self.on_start(self.proc.pid)
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_ready(self, self.ready, self.netns, timeout, f"daemon {Path(self.argv[0]).name}")

    def tail(self, lines: int = 3) -> str:
        return DaemonProcess.tail(self, lines)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self, sig: int = signal.SIGKILL, wait: float = 10.0) -> int | None:
        """Send sig to the daemon's process group; for SIGKILL/SIGTERM/SIGINT wait for the
        exit (and kill what it left in its group). The state dir stays as it is."""
        if not self.alive():
            return None
        self._signal_group(sig)
        if sig not in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            return None
        try:
            code = self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            code = self.proc.wait(wait)
        self._signal_group(signal.SIGKILL)  # children that outlived it
        return code

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def restart(self, wait: float = 60.0) -> TargetProcess:
        self.stop()
        return self.start(wait)

    def checkpoint(self) -> dict:
        return DaemonProcess.checkpoint(self)


class TargetContainer(ContainerDaemon):
    """A target's daemon as a container joined to the node's namespace, ready by the
    target's own readiness (the kit's image when the target is built in)."""

    def __init__(self, engine, state_dir, env, netns, ready: ReadySpec | None, **kw):
        super().__init__(engine, state_dir, env=env, netns=netns, **kw)
        self.ready = ready

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_ready(self, self.ready, self.netns, timeout, f"daemon container {self.name}")


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
