"""The daemon sampler: each node's build watched from outside while a scenario runs."""

from __future__ import annotations

import threading
import time

from cnikit.check.history import MONITOR, History
from cnikit.scenarios.engine.outcomes import liveness_record


class DaemonSampler:
    """Watches each node's build from outside while the scenario runs: its daemon process
    (one that exits by itself is a liveness violation) and, when the target declares the
    [observe] introspection port, its datastore (upstream's /v1/enis) whenever it changes."""

    REPEAT = 1.0  # seconds: an unchanged view is recorded again this often
    # A view is asked at least every `interval` seconds, and soon after a pod comes or goes
    # (what changes a datastore most), but never more than once per MIN_GAP. Asked five
    # times a second throughout, the views were a third of a quiet cluster's CPU (the kit
    # asking, each daemon answering: bench/bench_cpu.py).
    MIN_GAP = 0.2

    def __init__(self, cluster, history: History, interval: float = 1.0, observe=None):
        self.c, self.h, self.interval = cluster, history, interval
        self._wake = threading.Event()
        # Pod adds and deletes wake the loop (a cluster without a fabric: the interval only).
        self._observers = getattr(getattr(cluster, "fabric", None), "observers", None)
        if observe is None:
            observe = getattr(getattr(cluster, "target", None), "observe", None)
        self.introspection = getattr(observe, "introspection", None)
        self.kit_down: set[int] = set()  # nodes whose daemon the kit stopped or is restarting
        self.liveness: list[dict] = []
        self._stop = threading.Event()
        self._last: dict[int, object] = {}
        self._sent: dict[int, float] = {}  # node -> when its last recorded view was asked
        self._exited: set[int] = set()
        self._thread = threading.Thread(target=self._loop, name="daemon-sampler", daemon=True)

    def start(self) -> DaemonSampler:
        if self._observers is not None:
            self._observers.append(self._on_pod)
        self._thread.start()
        return self

    def _on_pod(self, event: str, pod) -> None:
        self._wake.set()

    def view(self, node: int) -> dict:
        """The node's /v1/enis (upstream's JSON), read inside its namespace."""
        from cnikit.scenarios.blackbox import introspect

        if not self.introspection:
            raise OSError("the target declares no [observe] introspection port")
        return introspect(self.c.fabric.nodes[node].ns.path, self.introspection)

    def sample(self, node: int) -> None:
        self._check_alive(node)
        if not self.introspection:
            return
        from cnikit.scenarios.blackbox import enis_view

        iid = self.c.fabric.nodes[node].instance_id
        # When the view was asked for: a daemon that answers late (busy with EC2) answers
        # with its state of then or later, never of before. Checkers judge by this time.
        asked = time.time()
        try:
            enis, held = enis_view(self.view(node))
        except (OSError, ValueError) as e:  # a daemon down is an observation
            if self._last.get(node) != "down":
                self._last[node] = "down"
                self.h.info(MONITOR, "daemon-view-error", {"instance_id": iid, "error": str(e)})
            return
        key = (enis, held)
        # Unchanged views are recorded again now and then, so a checker knows the view it
        # holds is still current (and not the last answer before the daemon went quiet).
        if self._last.get(node) == key and asked - self._sent.get(node, 0.0) < self.REPEAT:
            return
        self._last[node], self._sent[node] = key, asked
        ips = sorted({ip for v in enis.values() for ip in v if "/" not in ip})
        self.h.info(MONITOR, "daemon-view", {"instance_id": iid, "ips": ips, "enis": enis,
                                             "assigned": held, "at": asked})

    def _check_alive(self, node: int) -> None:
        daemons = getattr(self.c, "daemons", None) or []
        d = daemons[node] if node < len(daemons) else None
        alive = getattr(d, "alive", None)
        if alive is None or node in self.kit_down:
            return
        if alive():
            self._exited.discard(node)
            return
        # Asked again: the kit marks a node before it kills, so a kill that landed between
        # the first look and alive() shows here.
        if node in self._exited or node in self.kit_down:
            return
        self._exited.add(node)
        proc = getattr(d, "proc", None)
        tail = getattr(d, "tail", None)
        evidence = {"exit code": getattr(proc, "returncode", None),
                    "log": tail() if tail else None}
        rec = liveness_record(self.c.fabric.nodes[node].name,
                              "the daemon exited by itself (the kit neither stopped nor killed it)",
                              evidence, timed=False)  # a process fact, however slow the machine
        self.liveness.append(rec)
        self.h.info(MONITOR, "daemon-exited", {"node": node, **evidence})

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            for n in range(self.c.n_nodes):
                if self._stop.is_set():
                    return
                self.sample(n)
            self._stop.wait(self.MIN_GAP)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._observers is not None and self._on_pod in self._observers:
            self._observers.remove(self._on_pod)
        self._thread.join(timeout=5)

