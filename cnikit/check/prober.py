"""The prober's client side: spawns `cnikit.check.prober_proc`, adds and removes pods over
its control pipe, and turns its event stream (pod ids) into observations (pod names).

    prober = Prober(on_event=print).start()
    prober.add([ProbeTarget("ck-ab12c-n0-p0", "/run/netns/ck-ab12c-n0-p0", "10.0.1.7")])
    prober.remove(["ck-ab12c-n0-p0"])
    prober.stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProbeTarget:
    """A pod to probe. An `anchor` (name starting with ANCHOR_PREFIX) is a fixed point of
    the network, such as the VPC router: every pod probes it every round, and it is never
    blamed, so a lost pod is told apart from its peers even when it is not in a minority."""

    name: str
    netns: str
    ip: str
    anchor: bool = False


ANCHOR_PREFIX = "@"


class ProberError(RuntimeError):
    pass


class Prober:
    def __init__(self, on_event: Callable[[dict], None] | None = None,
                 interval: float | None = None,
                 timeout: float = 0.005, fail_after: int = 3, max_inflight: int = 256,
                 confirm_timeout: float = 0.25, linger: float = 0.0,
                 run_dir: Path | None = None, threads: int | None = None):
        self.on_event = on_event or (lambda ev: None)
        # interval: seconds per round (every pod probed once as source and as destination);
        # None: automatic, 0.1 s up to 500 pods, slower beyond (at most 0.5 s).
        # linger: seconds a removed pod's flows go on (its peers keep sending to its old
        # IP, as long-lived connections do): an answer from another pod is a `stale` event.
        self.config = {"interval": -1.0 if interval is None else interval,
                       "timeout": timeout, "fail_after": fail_after,
                       "confirm_timeout": confirm_timeout,
                       "max_inflight": max_inflight, "linger": linger}
        self.run_dir = run_dir
        # Probing threads in the prober process; None: up to two, as many cores as there are.
        self.threads = threads
        self.proc: subprocess.Popen | None = None
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._acks: list[dict] = []
        self._reader: threading.Thread | None = None
        self.last_stats: dict = {}
        self.pid: int | None = None

    def start(self, timeout: float = 10.0) -> Prober:
        env = {**os.environ, "CNIKIT_PROBER_PARENT": str(os.getpid())}
        argv = [sys.executable, "-m", "cnikit.check.prober_proc"]
        if self.threads is not None:
            argv += ["--threads", str(self.threads)]
        self.proc = subprocess.Popen(argv,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                     env=env)
        if self.run_dir is not None:
            from cnikit.fabric.cleanup import record_process

            record_process(self.run_dir, self.proc.pid)
        self._reader = threading.Thread(target=self._read, name="prober-events", daemon=True)
        self._reader.start()
        self._await("ready", timeout)
        self.configure(**self.config)
        return self

    def __enter__(self) -> Prober:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _send(self, msg: dict) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise ProberError("the prober process is not running")
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())

    def _await(self, ev: str, timeout: float) -> dict:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for i, a in enumerate(self._acks):
                    if a["ev"] == ev:
                        return self._acks.pop(i)
                left = end - time.monotonic()
                if left <= 0 or (self.proc is not None and self.proc.poll() is not None):
                    raise ProberError(f"the prober did not answer '{ev}' within {timeout}s")
                self._cond.wait(min(left, 0.1))

    def configure(self, **config) -> None:
        self.config.update(config)
        self._send({"op": "config", **config})
        self._await("configured", 10)

    def add(self, targets: list[ProbeTarget], timeout: float = 30.0) -> dict[str, str]:
        """Open a socket in each pod; returns {name: error} for pods it could not enter."""
        pods = []
        with self._lock:
            for t in targets:
                pid = self._ids.get(t.name) or self._next_id
                if pid == self._next_id:
                    self._next_id += 1
                self._ids[t.name] = pid
                self._names[pid] = t.name
                pods.append({"id": pid, "netns": t.netns, "ip": t.ip, "anchor": t.anchor})
        if not pods:
            return {}
        self._send({"op": "add", "pods": pods})
        ack = self._await("added", timeout)
        return {self._names.get(int(i), str(i)): e for i, e in ack["errors"].items()}

    def remove(self, names: list[str]) -> None:
        with self._lock:
            ids = [self._ids.pop(n) for n in names if n in self._ids]
        if ids:
            self._send({"op": "remove", "ids": ids})
            self._await("removed", 10)

    def name(self, pid: int) -> str:
        return self._names.get(pid, f"#{pid}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            kind = ev["ev"]
            if kind in ("ready", "added", "removed", "configured"):
                if kind == "ready":
                    self.pid = ev.get("pid")
                with self._cond:
                    self._acks.append(ev)
                    self._cond.notify_all()
                continue
            for key in ("src", "dst", "by"):
                if key in ev:
                    ev[key] = self.name(ev[key])
            if kind == "stats":
                ev["stale"] = [self.name(i) for i in ev.get("stale", [])]
                self.last_stats = ev
            try:
                self.on_event(ev)
            except Exception:  # noqa: BLE001 - a failing observer must not stop the stream
                import logging

                logging.getLogger(__name__).exception("prober event handler")
        with self._cond:
            self._cond.notify_all()

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self._send({"op": "stop"})
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        with contextlib.suppress(Exception):
            self.proc.stdout.close()
        self.proc = None
