"""The embedded EC2 upstream: moto's ThreadedMotoServer on loopback, ephemeral port."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import urllib.request
from pathlib import Path

import moto.core.responses
from moto.server import ThreadedMotoServer

# moto loads 1,301 AMIs (its 44 and the region's latest) into every EC2 backend it makes,
# so again after every reset: 0.22 s of CPU, and 0.14 s more to reset them, in every run.
# The kit's instances boot from one (cloud.DEFAULT_AMI), and MOTO_AMIS_PATH, moto's own
# setting, loads just that one. A value already set is left alone.
KIT_AMIS = str(Path(__file__).with_name("amis.json"))
os.environ.setdefault("MOTO_AMIS_PATH", KIT_AMIS)

# moto lists a response class's methods (inspect.getmembers) on every request to find the
# action's: 0.5 ms of CPU for EC2's 301, with the GIL held, hundreds of times in a run. A
# class's methods do not change while it serves, so each class is listed once.
if not hasattr(moto.core.responses.method_names_from_class, "cache_info"):
    moto.core.responses.method_names_from_class = functools.cache(
        moto.core.responses.method_names_from_class)


class MotoServer:
    """moto as a real HTTP server in this process. `url` is valid after `start()`.

    moto keeps its backends in module globals, so every server in one process shares one
    EC2. A server started while no other is live wipes that state first: a Cloud that
    follows another in the same test process starts clean. Servers alive at the same
    time share state (the gate in front of each still sees every ENI and never hands out
    an address twice).
    """

    _live = 0
    _live_lock = threading.Lock()

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
        self.url = ""

    def start(self) -> MotoServer:
        # werkzeug logs every request at INFO: thousands of lines in a chaos run.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        with MotoServer._live_lock:
            first = MotoServer._live == 0
            MotoServer._live += 1
        if first:
            self.reset()
        return self

    def reset(self) -> None:
        """Wipe all state (about 0.3 s), for tests that share one server."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        # A process's first reset builds every moto backend: seconds of CPU, and past ten on
        # a CI runner busy with ten test workers (CI: a run that never started).
        urllib.request.urlopen(req, timeout=60).read()

    def stop(self) -> None:
        if self.url:
            with MotoServer._live_lock:
                MotoServer._live -= 1
            self.url = ""
        self._server.stop()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_http(url: str, deadline_s: float = 10.0) -> None:
    """Wait until url answers anything over HTTP (an external upstream starting up)."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return
        except OSError as e:
            last = e
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {deadline_s:.0f}s: {last}")
