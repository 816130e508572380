"""The IMDS server's lifecycle: a background thread with its own event loop, the EC2 view it
follows, its sites and listeners, the control API beside it.

    imds = ImdsServer(ec2_endpoint=cloud.endpoint).start()
    imds.url, imds.control_url; imds.add_listener(sock); imds.stop()

The IMDS side is aiohttp's low-level server (no router: the hot path is one dict lookup
into bodies precomputed by the engine), answering with fault_imds.handler.ImdsHandler. The
control API is a separate aiohttp app on its own port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
import time
from typing import Any

from aiohttp import web

from fault_imds.control import control_app
from fault_imds.ec2_view import Ec2View
from fault_imds.engine import Engine
from fault_imds.fence import Fence
from fault_imds.handler import ImdsHandler
from fault_imds.request_log import RequestLog
from fault_imds.tokens import TokenStore

# How long add_listener waits for the server's loop (see there).
ADD_LISTENER_S = 60.0
log = logging.getLogger("fault_imds")
TICK_S = 0.02


class ImdsServer:
    """An IMDS following EC2 at `ec2_endpoint`, with faults set over the control API.

    `seed` makes probabilistic faults and latency jitter reproducible. `poll_interval` is
    how often EC2 is read; `history_s` how far back `lag` can reach.
    """

    def __init__(
        self,
        ec2_endpoint: str,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        control: tuple[str, int] = ("127.0.0.1", 0),
        instance_id: str | None = None,
        require_v2: bool = False,
        seed: int | None = None,
        region: str = "us-east-1",
        poll_interval: float = 0.05,
        history_s: float = 900.0,
        ec2_wait_s: float = 30.0,
    ):
        self.ec2_endpoint = ec2_endpoint
        self.listen = listen
        self.control = control
        self.instance_id = instance_id
        self.require_v2 = require_v2
        self.seed = seed
        self.region = region
        self.poll_interval = poll_interval
        self.history_s = history_s
        self.ec2_wait_s = ec2_wait_s
        self.url = ""
        self.control_url = ""
        self.engine: Engine | None = None
        self.ec2: Ec2View | None = None
        self.fence: Fence | None = None
        self.handler: ImdsHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self._imds_runner: web.ServerRunner | None = None
        self._control_runner: web.AppRunner | None = None
        self._extra_sites: list[web.SockSite] = []
        self._started_at = 0.0
        self.request_log = RequestLog()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ImdsServer:
        self._thread = threading.Thread(target=self._thread_main, name="fault-imds", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join(timeout=10)
            raise self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout=20)
        if self.ec2 is not None:
            self.ec2.stop()

    def __enter__(self) -> ImdsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def add_listener(self, sock: socket.socket) -> None:
        """Also serve IMDS on a pre-bound listening socket (e.g. 169.254.169.254:80 made
        inside the VPC namespace). The caller keeps no duty: stop() closes it."""
        if self._loop is None:
            raise RuntimeError("start() the server before add_listener()")
        fut = asyncio.run_coroutine_threadsafe(self._add_site(sock), self._loop)
        try:
            # A busy machine can keep the server's loop from it for seconds: the bound is
            # only there to turn a dead server thread into an error, never a verdict.
            fut.result(timeout=ADD_LISTENER_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise RuntimeError(f"the fault IMDS server did not take a listener within "
                               f"{ADD_LISTENER_S:g}s (its thread stuck or gone)") from None

    # -- in the server thread ----------------------------------------------------------------

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as e:  # reported to start() when it happens during startup
            if not self._ready.is_set():
                self._startup_error = e
            else:
                log.exception("fault-imds server thread failed")
        finally:
            self._ready.set()
            loop.close()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self.engine = Engine(seed=self.seed)
        self.ec2 = Ec2View(
            self.ec2_endpoint,
            region=self.region,
            interval=self.poll_interval,
            history_s=self.history_s,
            on_change=lambda state: loop.call_soon_threadsafe(self.engine.set_state, state),
            # After on_change's, on this loop: a fence released has the state it waited for.
            on_polled=lambda count: loop.call_soon_threadsafe(self._polled, count),
        )
        counter = self.ec2.counter
        self.fence = Fence(counter, self.ec2) if counter is not None else None
        self.engine.history = self.ec2
        self.ec2.start()
        try:
            first = await loop.run_in_executor(None, self.ec2.wait_first, self.ec2_wait_s)
            if not first:
                raise ConnectionError(
                    f"EC2 at {self.ec2_endpoint} did not answer within {self.ec2_wait_s:g}s: "
                    f"{self.ec2.last_error}"
                )
            # The first state was scheduled onto this loop; let it land before serving.
            while self.engine.state is None:
                await asyncio.sleep(0.005)
            self.tokens = TokenStore()
            self.handler = ImdsHandler(
                self.engine, self.tokens, self.instance_id, self.require_v2, self.request_log,
                self.fence,
            )
            server = web.Server(self.handler, access_log=None)
            self._imds_runner = web.ServerRunner(server, access_log=None, shutdown_timeout=1)
            await self._imds_runner.setup()
            site = web.TCPSite(self._imds_runner, self.listen[0], self.listen[1], backlog=1024)
            await site.start()
            self.url = _url(self._imds_runner.addresses[0])
            self._control_runner = web.AppRunner(
                control_app(self.engine, self._health, self.request_log, self.fence),
                access_log=None,
                shutdown_timeout=1,
                # A refused body (413) is not drained for seconds: the connection just closes.
                lingering_time=0,
            )
            await self._control_runner.setup()
            csite = web.TCPSite(self._control_runner, self.control[0], self.control[1])
            await csite.start()
            self.control_url = _url(self._control_runner.addresses[0])
            self._started_at = time.monotonic()
        except BaseException:
            self.ec2.stop()
            await self._cleanup()
            raise
        self._ready.set()
        ticker = asyncio.create_task(self._tick())
        try:
            await self._stopping.wait()
        finally:
            ticker.cancel()
            # The poller hands states to this loop: stop it before the loop goes away.
            await loop.run_in_executor(None, self.ec2.stop)
            await self._cleanup()

    def _polled(self, count: int) -> None:
        if self.fence is not None:
            self.fence.polled(count)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        added = asyncio.Event()
        self.engine.on_fault_added = lambda: loop.call_soon_threadsafe(added.set)
        while True:
            if not self.engine.faults:
                # A tick acts on faults only (expiry, a lag moving on): with none, wait for
                # one rather than wake 50 times a second for the whole run.
                added.clear()
                await added.wait()
            await asyncio.sleep(TICK_S)
            try:
                self.engine.tick()
            except Exception:
                log.exception("fault engine tick failed")

    async def _add_site(self, sock: socket.socket) -> None:
        site = web.SockSite(self._imds_runner, sock)
        await site.start()
        self._extra_sites.append(site)

    async def _cleanup(self) -> None:
        for runner in (self._imds_runner, self._control_runner):
            if runner is not None:
                await runner.cleanup()

    def _health(self) -> dict[str, Any]:
        ec2 = self.ec2
        return {
            "ok": ec2 is not None and ec2.last_error is None,
            "ec2_endpoint": self.ec2_endpoint,
            "ec2_error": ec2.last_error if ec2 else None,
            "ec2_polls": ec2.polls if ec2 else 0,
            "instances": sorted(self.engine.true_models) if self.engine else [],
            "faults": len(self.engine.faults) if self.engine else 0,
            "requests": self.handler.requests if self.handler else 0,
            # None: EC2 runs elsewhere, followed by polling; else answers served before the
            # view caught up with EC2 (EC2 unreadable, or fence.FENCE_S passed).
            "late_answers": self.fence.late if self.fence else None,
            "uptime_s": round(time.monotonic() - self._started_at, 3),
        }


def _url(sockaddr) -> str:
    host, port = sockaddr[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"

