"""A Jepsen-style history: an append-only log of operations, faults and observations.

Entry: {"index", "time" (epoch s), "mono" (monotonic s), "process", "type", "f", "value"}
  process  "client" (pods made and deleted), "nemesis" (faults), "prober", "monitor"
  type     "invoke" / "ok" / "fail" for operations, "info" for observations; the nemesis's
           "start" / "end" / "info" / "fail" (one shape for every fault: cnikit.cluster.nemesis)
Checkers judge the history (cnikit.check.checkers); nothing in it is ever changed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

CLIENT, NEMESIS, PROBER, MONITOR = "client", "nemesis", "prober", "monitor"


class History:
    def __init__(self) -> None:
        self._entries: list[dict] = []
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[dict], None]] = []

    def subscribe(self, fn: Callable[[dict], None]) -> None:
        """fn(entry) for every entry appended from now on, in order."""
        with self._lock:
            self._subscribers.append(fn)

    def append(self, process: str, type_: str, f: str, value=None, *, at: float | None = None,
               mono: float | None = None) -> dict:
        with self._lock:
            entry = {"index": len(self._entries), "time": time.time() if at is None else at,
                     "mono": time.monotonic() if mono is None else mono,
                     "process": process, "type": type_, "f": f, "value": value}
            self._entries.append(entry)
            # Under the lock: subscribers see entries in index order.
            for fn in self._subscribers:
                fn(entry)
        return entry

    def info(self, process: str, f: str, value=None, **kw) -> dict:
        return self.append(process, "info", f, value, **kw)

    def op(self, f: str, value=None, process: str = CLIENT):
        """A context manager recording invoke, then ok (or fail with the error)."""
        return _Op(self, process, f, value)

    def entries(self, since: int = 0) -> list[dict]:
        with self._lock:
            return list(self._entries[since:])

    def __len__(self) -> int:
        return len(self._entries)

    def to_json(self) -> list[dict]:
        return self.entries()

    def dump(self, path: str | Path) -> None:
        Path(path).write_text("\n".join(json.dumps(e, default=str) for e in self.entries()) + "\n")

    @staticmethod
    def load(path: str | Path) -> list[dict]:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


class _Op:
    def __init__(self, history: History, process: str, f: str, value):
        self.h, self.process, self.f, self.value = history, process, f, value
        self.result = None

    def __enter__(self) -> _Op:
        self.h.append(self.process, "invoke", self.f, self.value)
        return self

    def __exit__(self, exc_type, exc, _tb) -> None:
        if exc is None:
            self.h.append(self.process, "ok", self.f,
                          self.result if self.result is not None else self.value)
        else:
            self.h.append(self.process, "fail", self.f, {"value": self.value, "error": str(exc)})
