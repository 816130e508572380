"""Every podman call the kit makes, with the kit's own configuration and storage.

podman reads CONTAINERS_CONF and CONTAINERS_STORAGE_CONF from its environment: the kit
writes both files under CONF_ROOT and passes them on every call, so /etc is never edited
and the kit's images and containers live in their own storage (cleanup can remove what is
there without guessing). What podman 4.3 needed on the 2-core Debian machines this was measured on: runc (crun fails on this
cgroup v1 setup), cgroupfs, and lowered ulimits (raising or `host` fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from cnikit.errors import EnvironmentProblem

CONF_ROOT = Path(os.environ.get("CNIKIT_PODMAN_ROOT", "/run/cnikit-podman"))
STORAGE_ROOT = Path(os.environ.get("CNIKIT_PODMAN_STORAGE", "/var/lib/cnikit/containers"))
LABEL_KIT = "io.cnikit.kit"
LABEL_RUN = "io.cnikit.run"
CNI_BIN = "/usr/lib/cni"

CONTAINERS_CONF = """\
# Written by cnikit (cnikit/containers/podman.py): used through CONTAINERS_CONF only.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root}/events.log"
tmp_dir = "{root}/libpod"
volume_path = "{storage}/volumes"

[network]
network_backend = "cni"
cni_plugin_dirs = [{plugin_dirs}]
network_config_dir = "{net_dir}"
"""

STORAGE_CONF = """\
# Written by cnikit: the kit's own podman storage (CONTAINERS_STORAGE_CONF).
[storage]
driver = "overlay"
graphroot = "{storage}/storage"
runroot = "{root}/storage"
"""


def _write_if_changed(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


class Podman:
    """podman with the kit's configuration. `net_dir`/`plugin_dirs` set the CNI backend's
    conflist directory and plugin path (a real CNI client test uses its own)."""

    def __init__(self, net_dir: str | os.PathLike | None = None,
                 plugin_dirs: list[str] | None = None, name: str = "default"):
        self.binary = shutil.which("podman")
        root = CONF_ROOT
        self.net_dir = Path(net_dir) if net_dir else root / "net.d"
        self.plugin_dirs = list(plugin_dirs or [CNI_BIN])
        self.conf = root / f"containers-{name}.conf"
        self.storage_conf = root / "storage.conf"

    @staticmethod
    def available() -> str | None:
        """None when podman can run here, else the one-line reason why not."""
        if shutil.which("podman") is None:
            return "podman is not installed (make setup installs it: apt package podman)"
        if shutil.which("runc") is None:
            return "runc is not installed (make setup installs it: apt package runc)"
        if os.geteuid() != 0:
            return "the podman runtime needs root (node namespaces)"
        return None

    def require(self) -> Podman:
        reason = self.available()
        if reason:
            raise EnvironmentProblem(reason)
        return self

    def env(self) -> dict[str, str]:
        self.net_dir.mkdir(parents=True, exist_ok=True)
        dirs = ", ".join(json.dumps(d) for d in self.plugin_dirs)
        _write_if_changed(self.conf, CONTAINERS_CONF.format(
            root=CONF_ROOT, storage=STORAGE_ROOT, plugin_dirs=dirs, net_dir=self.net_dir))
        _write_if_changed(self.storage_conf, STORAGE_CONF.format(root=CONF_ROOT, storage=STORAGE_ROOT))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERS_")}
        env["CONTAINERS_CONF"] = str(self.conf)
        env["CONTAINERS_STORAGE_CONF"] = str(self.storage_conf)
        return env

    def command(self, *args: str) -> list[str]:
        return [self.binary or "podman", *args]

    def run(self, *args: str, check: bool = True, timeout: float = 120.0,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        """Run `podman ARGS`; on failure (check) an EnvironmentProblem with podman's last line."""
        self.require()
        try:
            p = subprocess.run(self.command(*args), env=self.env(), capture_output=True,
                               timeout=timeout, input=input)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"podman {args[0]} did not finish in {timeout:.0f}s") from None
        if check and p.returncode != 0:
            err = p.stderr.decode(errors="replace").strip().splitlines()
            raise EnvironmentProblem(f"podman {' '.join(args[:2])}: {err[-1] if err else p.returncode}")
        return p

    def out(self, *args: str, **kw) -> str:
        return self.run(*args, **kw).stdout.decode().strip()

    # ---- queries ----------------------------------------------------------------------

    def containers(self, label: str | None = None) -> list[dict]:
        args = ["ps", "-a", "--format", "json"]
        if label:
            args += ["--filter", f"label={label}"]
        return json.loads(self.out(*args) or "[]")

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "exists", ref, check=False).returncode == 0

    def inspect(self, name: str) -> dict | None:
        p = self.run("container", "inspect", name, check=False)
        if p.returncode != 0:
            return None
        data = json.loads(p.stdout or b"[]")
        return data[0] if data else None


class ApiService:
    """podman serving the Docker Engine API on a unix socket (`podman system service`), with
    the kit's configuration and storage: the Docker runtime (the `docker` package) then runs
    here without a Docker engine. Point DOCKER_HOST at `url`.

        with ApiService() as api:
            os.environ["DOCKER_HOST"] = api.url
    """

    def __init__(self, socket_path: str | os.PathLike | None = None):
        self.podman = Podman()
        self.socket_path = Path(socket_path or CONF_ROOT / f"docker-api-{os.getpid()}.sock")
        self.url = f"unix://{self.socket_path}"
        self.log_path = self.socket_path.with_suffix(".log")
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> ApiService:
        self.podman.require()
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        with open(self.log_path, "wb") as log:
            # --time=0: serve until stopped, however long the API stays idle.
            self._proc = subprocess.Popen(
                self.podman.command("system", "service", "--time=0", self.url),
                env=self.podman.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:]
                self.stop()
                raise EnvironmentProblem(f"podman system service did not serve {self.url}: "
                                         f"{tail[0] if tail else 'no output'}")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        """A GET /_ping on the socket answers OK."""
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(self.socket_path))
            s.sendall(b"GET /_ping HTTP/1.1\r\nHost: podman\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
        return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc = None
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> ApiService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
