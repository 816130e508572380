"""The Docker Engine API (the `docker` package): the daemon's containers and its image."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cnikit import runtime as kit_runtime
from cnikit.containers.container_ops import CAPABILITIES, SECURITY_OPTS, remove_retrying
from cnikit.containers.podman import LABEL_KIT, LABEL_RUN
from cnikit.errors import EnvironmentProblem

if TYPE_CHECKING:
    from cnikit.containers.container_daemon import ContainerDaemon

MISSING_IS_AN_ERROR = object()  # Docker.call(missing=...): a missing object is an error too


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

    def call(self, what: str, call, *args, missing=None, **kw):
        """One Engine API call; an error is an EnvironmentProblem with the engine's reason,
        except `missing` (returned) when the object is not there."""
        import docker
        import requests

        try:
            return call(*args, **kw)
        except docker.errors.NotFound:
            if missing is MISSING_IS_AN_ERROR:
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
        created = self.call("create", api.create_container, spec.image, command=spec.command,
                            entrypoint=spec.entrypoint, name=spec.name, labels=spec.labels,
                            environment=spec.env, host_config=host_config, missing=MISSING_IS_AN_ERROR)
        cid = created["Id"]
        self.call("start", api.start, cid, missing=MISSING_IS_AN_ERROR)
        state = self.call("inspect", api.inspect_container, cid, missing={}).get("State", {})
        pid = state.get("Pid") or None
        return cid, pid

    def inspect(self, name: str) -> dict | None:
        return self.call("inspect", self.client.api.inspect_container, name)

    def kill(self, name: str, sig: int) -> None:
        try:
            self.call("kill", self.client.api.kill, name, signal=int(sig))
        except EnvironmentProblem:
            pass  # not running (any more): what a kill wants

    def exit_code(self, name: str) -> int | None:
        info = self.inspect(name)
        return info["State"].get("ExitCode") if info else None

    def remove(self, name: str) -> None:
        remove_retrying(lambda: self.call("rm", self.client.api.remove_container, name, force=True),
                         lambda: self.client.api.wait(name, timeout=5))

    def logs(self, daemon: ContainerDaemon, lines: int) -> str:
        out = self.call("logs", self.client.api.logs, daemon.name, tail=lines, missing=b"")
        return out.decode(errors="replace")

    def kit_containers(self) -> list[tuple[str, str]]:
        """(name, run id) of every container with the kit's label."""
        rows = self.call("ps", self.client.api.containers, all=True,
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
        return self.call("image inspect", self.client.api.inspect_image, ref) is not None

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
            self.drop_old_images(ref.rpartition(":")[0], keep=ref)
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
            out = self.call("import", self.client.api.import_image, src=str(tar),
                            repository=repo, tag=tag, changes=changes, missing=MISSING_IS_AN_ERROR)
        finally:
            tar.unlink(missing_ok=True)
        if not self.image_exists(ref):  # podman 4.3's import tags `latest`, whatever asked
            image_id = _imported_id(out)
            if image_id:
                self.call("tag", self.client.api.tag, image_id, repo, tag)
        if not self.image_exists(ref):
            raise EnvironmentProblem(f"docker import: {ref} is not there after the import")
        return ref

    def drop_old_images(self, repo: str, keep: str) -> None:
        """The kit's earlier daemon images (an image in use stays: the engine refuses)."""
        rows = self.call("images", self.client.api.images, name=repo, missing=[])
        for tag in {t for row in rows for t in row.get("RepoTags") or []} - {keep}:
            with contextlib.suppress(EnvironmentProblem):
                self.call("rmi", self.client.api.remove_image, tag)


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


def _import_changes(image) -> list[str]:
    """The image settings image.ensure_image gives its podman import, for the API's import."""
    return [f"ENTRYPOINT {image.ENTRYPOINT}", 'CMD ["daemon"]', "ENV PYTHONUNBUFFERED=1",
            "ENV PYTHONDONTWRITEBYTECODE=1", f"ENV PYTHONPATH=/{image.SITE}",
            f"LABEL {LABEL_KIT}=daemon"]
