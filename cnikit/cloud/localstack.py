"""LocalStack as an EC2 upstream: where it is, and one of our own when none runs.

Where a LocalStack runs is localstack-client's business (`AWS_ENDPOINT_URL`, else
`LOCALSTACK_HOST`, default localhost:4566, `USE_SSL`): `endpoint()` asks it, so the kit
follows the same conventions as every other LocalStack user's tooling.

LocalStack's own pins clash with the kit's, so it never lives in `.venv`: LocalStackProcess
starts `.venv-localstack/bin/python -m localstack.runtime.main` (`make localstack`) as a
child process (no Docker) on a loopback port, waits for its health endpoint, and stops it
(SIGKILL to its session: it keeps nothing).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from cnikit import reaper, runtime
from cnikit.cloud.moto_server import KIT_AMIS, wait_http
from cnikit.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-localstack"
DIR_PREFIX = reaper.TEMP_PREFIX + "localstack-"


def endpoint(localstack_host: str | None = None) -> str:
    """LocalStack's EC2 endpoint by localstack-client's rules (`localstack_host` is
    "host[:port]"; AWS_ENDPOINT_URL, when set, wins as it does for localstack-client)."""
    from localstack_client.config import get_service_endpoint

    return get_service_endpoint("ec2", localstack_host=localstack_host).rstrip("/")


def localstack_python() -> Path | None:
    """The LocalStack venv's python, or None when `make localstack` has not been run."""
    py = Path(os.environ.get("CNIKIT_LOCALSTACK_VENV", VENV)) / "bin" / "python"
    return py if py.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _remove_orphaned_dirs() -> None:
    """The temp dirs of LocalStacks whose starter died without stopping them (the process
    itself died with it: `reaper.tied`)."""
    for d in Path(tempfile.gettempdir()).glob(DIR_PREFIX + "*"):
        if (owner := runtime.owner_of(d)) is not None and not runtime.still_running(*owner):
            shutil.rmtree(d, ignore_errors=True)


class LocalStackProcess:
    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    def start(self, deadline_s: float = 90.0) -> LocalStackProcess:
        py = localstack_python()
        if py is None:
            raise EnvironmentProblem("LocalStack is not installed: run `make localstack`")
        _remove_orphaned_dirs()
        self._dir = tempfile.TemporaryDirectory(prefix=DIR_PREFIX)
        runtime.write_owner(Path(self._dir.name))
        reaper.ensure()  # removes that dir should this process die without stop()
        env = dict(os.environ, SERVICES="ec2", EAGER_SERVICE_LOADING="1",
                   GATEWAY_LISTEN=f"127.0.0.1:{self.port}", DNS_ADDRESS="0",
                   SKIP_SSL_CERT_DOWNLOAD="1",
                   # Host mode even inside a container, so every file LocalStack writes
                   # lands in our temp dir (not /var/lib/localstack) and goes with it.
                   OVERRIDE_IN_DOCKER="0", FILESYSTEM_ROOT=self._dir.name)
        if env.get("MOTO_AMIS_PATH") == KIT_AMIS:  # the embedded moto's setting, not LocalStack's
            del env["MOTO_AMIS_PATH"]
        self.log_path = Path(self._dir.name) / "localstack.log"
        with open(self.log_path, "wb") as logf:
            # Tied to this process: a test session that crashes must not leave a LocalStack
            # (640 MB) running; its temp dir goes with this process's reaper.
            self._proc = subprocess.Popen(
                reaper.tied([str(py), "-m", "localstack.runtime.main"]), env=env,
                cwd=self._dir.name,
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self._proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise EnvironmentProblem(f"LocalStack exited at start: {tail}")
            try:
                wait_http(self.url + "/_localstack/health", deadline_s=1)
                return self
            except TimeoutError:
                continue
        self.stop()
        raise EnvironmentProblem(f"LocalStack did not answer within {deadline_s:.0f}s")

    def stop(self) -> None:
        # SIGKILL to its whole session: nothing of this LocalStack is kept (its files are in
        # our temp dir), and its graceful shutdown cost 3.6 s of CPU and 4 s (measured).
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait(10)
        self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> LocalStackProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
