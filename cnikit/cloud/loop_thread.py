"""A server's asyncio loop in a thread of the kit's process: what the gate and the run's
object store (cnikit.kube) share. A subclass names its thread and writes `_startup()` and
`_shutdown()` (coroutines, run on the loop); start() and stop() may be called from any
thread, and `_run(coro, timeout)` runs another coroutine there and returns its result."""

from __future__ import annotations

import asyncio
import logging
import threading

log = logging.getLogger(__name__)


class LoopThread:
    thread_name = "loop"
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    async def _startup(self) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    def start(self, timeout: float = 60.0):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.thread_name,
                                        daemon=True)
        self._thread.start()
        try:
            self._run(self._startup(), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._loop.is_running():
            try:
                self._run(self._shutdown(), 10)
            except Exception:  # noqa: BLE001 - stopping must not fail on a half-started server
                log.exception("%s shutdown", self.thread_name)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
        self._loop = None

    def _run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
