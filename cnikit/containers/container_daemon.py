"""The node's daemon in a container (a cnikit.daemon.handle.DaemonHandle): the container
it is (container_ops.ContainerSpec, or the same as podman's `run` arguments), started fresh
on the same state directory each time, through the engine's operations (docker_api's
Docker, podman_ops's PodmanCli)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cnikit import reaper
from cnikit import runtime as kit_runtime
from cnikit.containers.container_ops import CAPABILITIES, SECURITY_OPTS, ContainerSpec
from cnikit.containers.docker_api import Docker
from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from cnikit.containers.podman_ops import PodmanCli
from cnikit.daemon.handle import POLL, DaemonHandle
from cnikit.errors import UsageError

PYTHON = "/usr/local/bin/python3"  # the image's interpreter (cnikit.containers.image)

# What upstream's aws-node DaemonSet (v1.18.x manifest) sets, minus the kubelet-only ones;
# every value here is also the daemon's default, so the runtimes behave the same.
DAEMONSET_ENV = {
    "ADDITIONAL_ENI_TAGS": "{}",
    "AWS_VPC_CNI_NODE_PORT_SUPPORT": "true",
    "AWS_VPC_ENI_MTU": "9001",
    "AWS_VPC_K8S_CNI_EXTERNALSNAT": "false",
    "AWS_VPC_K8S_CNI_LOGLEVEL": "DEBUG",
    "AWS_VPC_K8S_CNI_VETHPREFIX": "eni",
    "DISABLE_INTROSPECTION": "false",
    "DISABLE_METRICS": "false",
    "ENABLE_IPv4": "true",
    "ENABLE_IPv6": "false",
    "ENABLE_POD_ENI": "false",
    "ENABLE_PREFIX_DELEGATION": "false",
    "WARM_ENI_TARGET": "1",
    "WARM_PREFIX_TARGET": "1",
}

_swept: set[str] = set()


class ContainerDaemon(DaemonHandle):
    """The node's daemon in a container. Each start is a fresh container on the same state
    directory, as kubelet restarts a DaemonSet pod's container."""

    def __init__(self, engine, state_dir: str | os.PathLike, env: dict[str, str] | None = None,
                 netns: str | None = None, name: str | None = None, run_id: str | None = None,
                 image: str | None = None, join: str | None = None,
                 args: list[str] | None = None):
        if not netns:
            raise UsageError("a container daemon needs a node namespace")
        self.engine = engine
        self.state_dir = Path(state_dir)
        self.env = dict(env or {})
        self.netns = netns if "/" in netns else f"/run/netns/{netns}"
        self.name = name or f"{Path(self.netns).name}-ipamd"
        self.run_id = run_id or _run_id_of(Path(self.netns).name)
        self.image = image
        self.args = args  # to the image's entrypoint; None: the kit image's `daemon` command
        # How the container gets into the node's namespace: "ns" (podman's --network ns:PATH)
        # or "enter" (Docker's way: --network none, then setns from inside).
        self.join = join or ("ns" if isinstance(engine, Podman) else "enter")
        if self.join not in ("ns", "enter"):
            raise UsageError(f"join must be ns or enter, not {self.join!r}")
        # What the engine is asked: Docker speaks the Engine API itself, podman its CLI.
        self._ops = engine if isinstance(engine, Docker) else PodmanCli(engine)
        self.what = f"daemon container {self.name}"
        self._pid: int | None = None
        self._pid_start: str | None = None
        self._exists = False
        self.exit_code: int | None = None

    # ---- the container runtime's part of DaemonHandle ------------------------------------

    @property
    def pid(self) -> int | None:
        return self._pid

    def alive(self) -> bool:
        # The container's main process, by pid and start time: no engine call per check.
        if self._pid is None:
            return False
        if kit_runtime.process_start_time(self._pid) != self._pid_start:
            return False
        try:
            state = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    def spec(self) -> ContainerSpec:
        """The container, whatever the engine (command() renders it for the podman CLI)."""
        image = self.image or self._ensure_image()
        env = {**DAEMONSET_ENV, "MY_NODE_NAME": Path(self.netns).name, "MY_POD_NAME": self.name,
               **self.env, "CNIKIT_STATE_DIR": str(self.state_dir), "PYTHONUNBUFFERED": "1"}
        labels = {LABEL_KIT: "daemon", **({LABEL_RUN: self.run_id} if self.run_id else {})}
        binds = [(str(self.state_dir), str(self.state_dir), ""),
                 ("/run/netns", "/run/netns", "rslave")]
        if kube := self.env.get("KUBECONFIG"):  # the cluster's store: a file of the run's state
            binds.append((kube, kube, "ro"))
        daemon = ["daemon", "--state-dir", str(self.state_dir)] if self.args is None else self.args
        if self.join == "ns":
            return ContainerSpec(self.name, image, env, labels, binds, f"ns:{self.netns}", None,
                                 daemon)
        # Docker joins no namespace by path: enter it from inside, then exec the daemon.
        return ContainerSpec(self.name, image, env, labels, binds, "none", [PYTHON],
                             ["-m", "cnikit.containers.enter", self.netns, "--",
                              PYTHON, "-m", "cnikit.cli", *daemon])

    def command(self) -> list[str]:
        """spec() as the `run` arguments of the podman (or docker) CLI, after the binary."""
        s = self.spec()
        args = ["run", "-d", "--name", s.name, "--log-opt", f"path={self.log_path}"]
        for cap in CAPABILITIES:
            args += ["--cap-add", cap]
        for opt in SECURITY_OPTS:
            args += ["--security-opt", opt]
        for k, v in s.labels.items():
            args += ["--label", f"{k}={v}"]
        for src, dst, mode in s.binds:
            args += ["-v", f"{src}:{dst}:{mode}" if mode else f"{src}:{dst}"]
        for k, v in sorted(s.env.items()):
            args += ["--env", f"{k}={v}"]
        args += ["--network", s.network]
        if s.entrypoint:
            args += ["--entrypoint", s.entrypoint[0]]
        return args + [s.image, *s.command]

    def _ensure_image(self) -> str:
        self.image = self._ops.ensure_image()
        return self.image

    def _spawn(self) -> int | None:
        self.engine.require()
        _sweep(self._ops)
        self.image = self.image or self._ensure_image()
        self._remove()
        reaper.mark_containers(self.run_id, "podman" if isinstance(self.engine, Podman)
                               else "docker")
        _, self._pid = self._ops.run_container(self)
        self._exists = True
        self._pid_start = kit_runtime.process_start_time(self._pid) if self._pid else None
        return self._pid

    def tail(self, lines: int = 3) -> str:
        text = self._ops.logs(self, lines).strip()
        return " | ".join(text.splitlines()[-lines:]) if text else "(no log)"

    def _signal(self, sig: int) -> None:
        self._ops.kill(self.name, sig)

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(POLL)
        return not self.alive()

    def _exit_status(self) -> int | None:
        self.exit_code = self._ops.exit_code(self.name)
        return self.exit_code

    def _stopped(self) -> None:
        self._remove()

    def _remove(self) -> None:
        if self._exists or self.starts == 0:
            self._ops.remove(self.name)
            self._exists = False


def _run_id_of(ns_name: str) -> str | None:
    from cnikit.fabric.names import run_id_of

    return run_id_of(ns_name)


def _sweep(ops) -> None:
    """Once per process and engine: remove the containers of runs that are gone."""
    key = type(ops).__name__
    if key in _swept:
        return
    _swept.add(key)
    ops.remove_dead_containers()
