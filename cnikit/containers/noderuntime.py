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
ContainerDaemon is the container runtime's part of it). The container shares
the state directory as a volume at the same path, so the plugin on the host finds the socket
where the process runtime puts it, and ipam.json survives restarts like a DaemonSet's
host-path volume. Containers are never privileged: they get the capabilities and security
options in CAPABILITIES and SECURITY_OPTS (docs/containers.md says why each), and see
/run/netns with slave propagation, so pod namespaces made later appear inside.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cnikit import reaper
from cnikit import runtime as kit_runtime
from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from cnikit.daemon.handle import POLL, DaemonHandle
from cnikit.daemon.process import DaemonProcess
from cnikit.errors import EnvironmentProblem, UsageError

RUNTIMES = ("process", "podman", "docker")
DEFAULT_RUNTIME = "process"
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
    """The Docker Engine API through the `docker` package, found as the docker CLI finds it
    (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH): a real Docker engine, or podman
    serving the same API (`podman system service`, cnikit.containers.podman.ApiService).

    Speaks in containers, not command lines: ContainerDaemon hands it a ContainerSpec.
    """

    TIMEOUT = 120
    # The API version each DOCKER_HOST answered, asked once a process: docker's client asks
    # /version at every connection, and podman's service answers it by running dpkg-query
    # for its packages (about 200 of them in `make test`, 10 s of CPU).
    _versions: dict[str, str] = {}

    def __init__(self) -> None:
        self._client = None

    @classmethod
    def _connect(cls, timeout: float):
        import docker

        host = cls.host()
        client = docker.from_env(timeout=timeout, version=cls._versions.get(host, "auto"))
        cls._versions.setdefault(host, client.api.api_version)
        return client

    @staticmethod
    def host() -> str:
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    @classmethod
    def available(cls) -> str | None:
        """None when an engine answers at DOCKER_HOST, else the one-line reason why not."""
        import docker
        import requests

        try:
            client = cls._connect(timeout=10)
            try:
                client.ping()
            finally:
                client.close()
        except (docker.errors.DockerException, requests.RequestException, OSError):
            from cnikit.containers.dockerd import engine_hint

            return (f"docker: no engine reachable at {cls.host()}: set DOCKER_HOST to one, "
                    + engine_hint())
        return None

    def require(self) -> Docker:
        reason = self.available()
        if reason:
            raise EnvironmentProblem(reason)
        return self

    @property
    def client(self):
        if self._client is None:
            self._client = self._connect(self.TIMEOUT)
        return self._client

    def _api(self, what: str, call, *args, missing=None, **kw):
        """One Engine API call; an error is an EnvironmentProblem with the engine's reason,
        except `missing` (returned) when the object is not there."""
        import docker
        import requests

        try:
            return call(*args, **kw)
        except docker.errors.NotFound:
            if missing is _RAISE:
                raise EnvironmentProblem(f"docker {what}: not found") from None
            return missing
        except docker.errors.APIError as e:
            raise EnvironmentProblem(f"docker {what}: {e.explanation or e}") from None
        except (docker.errors.DockerException, requests.RequestException, OSError) as e:
            raise EnvironmentProblem(f"docker {what}: {e}") from None

    # ---- containers -------------------------------------------------------------------

    def run_container(self, daemon: ContainerDaemon) -> tuple[str, int | None]:
        """Create and start daemon's container; (its id, its main process's pid here)."""
        spec, api = daemon.spec(), self.client.api
        host_config = api.create_host_config(
            cap_add=list(CAPABILITIES), security_opt=list(SECURITY_OPTS),
            network_mode=spec.network,
            binds=[f"{src}:{dst}:{mode}" if mode else f"{src}:{dst}" for src, dst, mode in spec.binds])
        created = self._api("create", api.create_container, spec.image, command=spec.command,
                            entrypoint=spec.entrypoint, name=spec.name, labels=spec.labels,
                            environment=spec.env, host_config=host_config, missing=_RAISE)
        cid = created["Id"]
        self._api("start", api.start, cid, missing=_RAISE)
        state = self._api("inspect", api.inspect_container, cid, missing={}).get("State", {})
        pid = state.get("Pid") or None
        return cid, pid

    def inspect(self, name: str) -> dict | None:
        return self._api("inspect", self.client.api.inspect_container, name)

    def kill(self, name: str, sig: int) -> None:
        try:
            self._api("kill", self.client.api.kill, name, signal=int(sig))
        except EnvironmentProblem:
            pass  # not running (any more): what a kill wants

    def exit_code(self, name: str) -> int | None:
        info = self.inspect(name)
        return info["State"].get("ExitCode") if info else None

    def remove(self, name: str) -> None:
        _remove_retrying(lambda: self._api("rm", self.client.api.remove_container, name, force=True),
                         lambda: self.client.api.wait(name, timeout=5))

    def logs(self, daemon: ContainerDaemon, lines: int) -> str:
        out = self._api("logs", self.client.api.logs, daemon.name, tail=lines, missing=b"")
        return out.decode(errors="replace")

    def kit_containers(self) -> list[tuple[str, str]]:
        """(name, run id) of every container with the kit's label."""
        rows = self._api("ps", self.client.api.containers, all=True,
                         filters={"label": LABEL_KIT}, missing=[])
        return [(c["Names"][0].lstrip("/"), (c.get("Labels") or {}).get(LABEL_RUN, ""))
                for c in rows if c.get("Names")]

    def remove_dead_containers(self) -> list[str]:
        """Remove the kit's containers whose run is dead (cleanup's rule); their names."""
        dead = [n for n, rid in self.kit_containers() if rid not in kit_runtime.live_run_ids()]
        for name in dead:
            self.remove(name)
        return dead

    # ---- the daemon image -------------------------------------------------------------

    def image_exists(self, ref: str) -> bool:
        return self._api("image inspect", self.client.api.inspect_image, ref) is not None

    def ensure_image(self, log=None) -> str:
        """The kit's daemon image (cnikit.containers.image), imported through the API when
        the engine lacks this version: no registry, no Dockerfile build."""
        import fcntl

        from cnikit.containers import image
        from cnikit.containers.podman import CONF_ROOT

        ref = image.image_ref()
        if self.image_exists(ref):
            return ref
        CONF_ROOT.mkdir(parents=True, exist_ok=True)
        with open(CONF_ROOT / "image.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.image_exists(ref):
                return ref
            t0 = time.monotonic()
            work = image.build_dir()
            shutil.rmtree(work, ignore_errors=True)
            rootfs = image.build_rootfs(work / "rootfs")
            self.import_rootfs(rootfs, ref, _import_changes(image))
            shutil.rmtree(work, ignore_errors=True)
            self._drop_old_images(ref.rpartition(":")[0], keep=ref)
            if log:
                log(f"built {ref} in {time.monotonic() - t0:.1f}s")
        return ref

    def import_rootfs(self, rootfs: Path, ref: str, changes: list[str]) -> str:
        """A root file system imported as image `ref` with Dockerfile-style `changes`
        (ENTRYPOINT, ENV, ...) through the API: `docker import`, no registry."""
        import tarfile

        tar = rootfs.parent / "rootfs.tar"
        with tarfile.open(tar, "w") as tf:
            for entry in sorted(os.listdir(rootfs)):
                tf.add(rootfs / entry, arcname=entry)
        repo, _, tag = ref.rpartition(":")
        try:
            out = self._api("import", self.client.api.import_image, src=str(tar),
                            repository=repo, tag=tag, changes=changes, missing=_RAISE)
        finally:
            tar.unlink(missing_ok=True)
        if not self.image_exists(ref):  # podman 4.3's import tags `latest`, whatever asked
            image_id = _imported_id(out)
            if image_id:
                self._api("tag", self.client.api.tag, image_id, repo, tag)
        if not self.image_exists(ref):
            raise EnvironmentProblem(f"docker import: {ref} is not there after the import")
        return ref

    def _drop_old_images(self, repo: str, keep: str) -> None:
        """The kit's earlier daemon images (an image in use stays: the engine refuses)."""
        rows = self._api("images", self.client.api.images, name=repo, missing=[])
        for tag in {t for row in rows for t in row.get("RepoTags") or []} - {keep}:
            with contextlib.suppress(EnvironmentProblem):
                self._api("rmi", self.client.api.remove_image, tag)


def _imported_id(answer) -> str | None:
    """The image id in an import's answer: JSON lines, the id in "status" (Docker) or "id"."""
    import json

    found = None
    for line in str(answer or "").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            msg = json.loads(line)
            for key in ("id", "status"):
                if str(msg.get(key, "")).startswith("sha256:"):
                    found = msg[key]
    return found


_RAISE = object()  # Docker._api(missing=_RAISE): a missing object is an error too


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


def _import_changes(image) -> list[str]:
    """The image settings image.ensure_image gives its podman import, for the API's import."""
    return [f"ENTRYPOINT {image.ENTRYPOINT}", 'CMD ["daemon"]', "ENV PYTHONUNBUFFERED=1",
            "ENV PYTHONDONTWRITEBYTECODE=1", f"ENV PYTHONPATH=/{image.SITE}",
            f"LABEL {LABEL_KIT}=daemon"]


def _remove_retrying(rm, wait, attempts: int = 5) -> None:
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


class PodmanCli:
    """Docker's container operations as podman commands: podman runs with the kit's own
    configuration and storage, and writes the daemon's log where tail() reads it."""

    def __init__(self, podman: Podman):
        self.podman = podman

    def run_container(self, daemon: ContainerDaemon) -> tuple[str, int | None]:
        cid = self.podman.out(*daemon.command())
        info = self.podman.out("inspect", "--format", "{{.State.Pid}}", cid)
        return cid, int(info) if info.isdigit() and int(info) > 0 else None

    def kill(self, name: str, sig: int) -> None:
        self.podman.run("kill", "--signal", str(int(sig)), name, check=False)

    def exit_code(self, name: str) -> int | None:
        code = self.podman.out("inspect", "--format", "{{.State.ExitCode}}", name, check=False)
        return int(code) if code.lstrip("-").isdigit() else None

    def remove(self, name: str) -> None:
        _remove_retrying(lambda: self.podman.run("rm", "-f", "--ignore", "--time", "0", name),
                         lambda: self.podman.run("wait", "--interval", "50ms", name, check=False,
                                                 timeout=10))

    def logs(self, daemon: ContainerDaemon, lines: int) -> str:
        try:
            text = daemon.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        # k8s-file lines: "<time> stdout F <text>"
        return "\n".join(line.split(" ", 3)[-1] for line in text[-lines:])

    def ensure_image(self) -> str:
        from cnikit.containers.image import ensure_image

        return ensure_image(self.podman)

    def remove_dead_containers(self) -> list[str]:
        from cnikit.containers.cleanup import remove_dead_containers

        return remove_dead_containers(self.podman)


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
