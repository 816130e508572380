"""Node runtimes: how a node's CNI daemon runs.

    process   `cnikit daemon` as a child process entered into the node namespace
              (cnikit.daemon.process.DaemonProcess)
    podman    the daemon image in a podman container joined to the node namespace with
              `--network ns:/run/netns/<node>`
    docker    the same with Docker, which cannot join a namespace by path: the container
              starts with `--network none` and its entrypoint enters the node namespace
              (setns) before it runs the daemon

All three have one interface: start(wait), wait_ready(timeout), alive(), kill(sig),
stop(), restart(wait), pid, socket_path, state_dir, on_start, tail(). The container shares
the state directory as a volume at the same path, so the plugin on the host finds the socket
where the process runtime puts it, and ipam.json survives restarts like a DaemonSet's
host-path volume. Containers run privileged (the daemon moves veths into pod namespaces)
and see /run/netns with slave propagation, so pod namespaces made later appear inside.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from cnikit import runtime as kit_runtime
from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from cnikit.daemon.process import DaemonProcess, StateDir, ping
from cnikit.errors import DaemonNotReady, EnvironmentProblem, UsageError

RUNTIMES = ("process", "podman", "docker")
DEFAULT_RUNTIME = "process"

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


class Docker:
    """The docker CLI with the same small interface as Podman (run/out/image_exists)."""

    binary = "docker"

    @staticmethod
    def available() -> str | None:
        if shutil.which("docker") is None:
            return "docker is not installed"
        try:
            p = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                               capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return "docker: the engine did not answer within 10s"
        if p.returncode != 0 or not p.stdout.strip():
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            return f"docker: no engine reachable at {host} (only the client is installed?)"
        return None

    def require(self) -> Docker:
        reason = self.available()
        if reason:
            raise EnvironmentProblem(reason)
        return self

    def run(self, *args: str, check: bool = True, timeout: float = 120.0, input=None):
        p = subprocess.run(["docker", *args], capture_output=True, timeout=timeout, input=input)
        if check and p.returncode != 0:
            err = p.stderr.decode(errors="replace").strip().splitlines()
            raise EnvironmentProblem(f"docker {' '.join(args[:2])}: {err[-1] if err else p.returncode}")
        return p

    def out(self, *args: str, **kw) -> str:
        return self.run(*args, **kw).stdout.decode().strip()

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False).returncode == 0


_swept: set[str] = set()


class ContainerDaemon(StateDir):
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
        self.starts = 0
        self.on_start = None
        self._pid: int | None = None
        self._pid_start: str | None = None
        self._exists = False
        self.exit_code: int | None = None

    # ---- the DaemonProcess interface ------------------------------------------------------

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

    def command(self) -> list[str]:
        """The `run` arguments (after the engine's binary)."""
        image = self.image or self._ensure_image()
        env = {**DAEMONSET_ENV, "MY_NODE_NAME": Path(self.netns).name, "MY_POD_NAME": self.name,
               **self.env, "CNIKIT_STATE_DIR": str(self.state_dir), "PYTHONUNBUFFERED": "1"}
        args = ["run", "-d", "--name", self.name, "--privileged",
                "--label", f"{LABEL_KIT}=daemon",
                "--log-opt", f"path={self.log_path}",
                "-v", f"{self.state_dir}:{self.state_dir}",
                "-v", "/run/netns:/run/netns:rslave"]
        if self.run_id:
            args += ["--label", f"{LABEL_RUN}={self.run_id}"]
        for k, v in sorted(env.items()):
            args += ["--env", f"{k}={v}"]
        daemon = ["daemon", "--state-dir", str(self.state_dir)] if self.args is None else self.args
        if self.join == "ns":
            args += ["--network", f"ns:{self.netns}", image, *daemon]
        else:
            # Docker joins no namespace by path: enter it from inside, then exec the daemon.
            args += ["--network", "none", "--entrypoint", "/usr/local/bin/python3", image,
                     "-m", "cnikit.containers.enter", self.netns, "--",
                     "/usr/local/bin/python3", "-m", "cnikit.cli", *daemon]
        return args

    def _ensure_image(self) -> str:
        from cnikit.containers.image import ensure_image

        self.image = ensure_image(self.engine)
        return self.image

    def start(self, wait: float = 30.0) -> ContainerDaemon:
        if self.alive():
            return self
        self.engine.require()
        _sweep(self.engine)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "ready").unlink(missing_ok=True)
        args = self.command()
        self._remove()
        cid = self.engine.out(*args)
        self._exists = True
        info = self.engine.out("inspect", "--format", "{{.State.Pid}}", cid)
        self._pid = int(info) if info.isdigit() and int(info) > 0 else None
        self._pid_start = kit_runtime.process_start_time(self._pid) if self._pid else None
        self.starts += 1
        if self._pid and self.on_start is not None:
            self.on_start(self._pid)
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.state_dir / "ready").exists() and ping(self.socket_path):
                return
            if not self.alive():
                raise DaemonNotReady(f"daemon container {self.name} exited: {self.tail()}")
            time.sleep(0.02)
        raise DaemonNotReady(f"daemon container {self.name} not ready after {timeout:.0f}s: {self.tail()}")

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        # k8s-file lines: "<time> stdout F <text>"
        return " | ".join(line.split(" ", 3)[-1] for line in text[-lines:])

    def kill(self, sig: int = signal.SIGKILL, wait: float = 10.0) -> int | None:
        """Send sig to the daemon in the container; for SIGKILL/SIGTERM/SIGINT wait for its exit."""
        if not self.alive():
            return None
        self.engine.run("kill", "--signal", str(int(sig)), self.name, check=False)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            deadline = time.monotonic() + wait
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.alive():
                self.engine.run("kill", "--signal", "KILL", self.name, check=False)
            code = self.engine.out("inspect", "--format", "{{.State.ExitCode}}", self.name, check=False)
            self.exit_code = int(code) if code.lstrip("-").isdigit() else None
            return self.exit_code
        return None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        self._remove()
        (self.state_dir / "ready").unlink(missing_ok=True)

    def restart(self, wait: float = 30.0) -> ContainerDaemon:
        self.stop()
        return self.start(wait)

    def checkpoint(self) -> dict:
        return DaemonProcess.checkpoint(self)

    def _remove(self) -> None:
        if self._exists or self.starts == 0:
            extra = ("--time", "0") if isinstance(self.engine, Podman) else ()
            self.engine.run("rm", "-f", *extra, self.name, check=False)
            self._exists = False


def _run_id_of(ns_name: str) -> str | None:
    from cnikit.fabric.names import run_id_of

    return run_id_of(ns_name)


def _sweep(engine) -> None:
    """Once per process and engine: remove the containers of runs that are gone."""
    key = type(engine).__name__
    if key in _swept:
        return
    _swept.add(key)
    from cnikit.containers.cleanup import remove_dead_containers

    remove_dead_containers(engine)
