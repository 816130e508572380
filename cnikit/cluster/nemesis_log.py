"""The nemesis's record: one entry per operation in every history it writes to, and the
faults begun and not ended (cnikit.cluster.nemesis has the shape of each entry)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable

from cnikit.check.history import NEMESIS, History

START, END, INFO, FAIL = "start", "end", "info", "fail"
SKIPPED = "fault-skipped"
# A fault's end event -> the `by` of its end entry.
ENDINGS = {"fault_ended": "ended", "fault_expired": "expired", "fault_removed": "removed"}


def error_text(e: Exception) -> str:
    """An exception as a fail entry's `error`: its type and words, bounded."""
    return f"{type(e).__name__}: {e}"[:300]


class NemesisLog:
    """The operations one history (or several: a kit's clusters share a cloud and an IMDS)
    sees. `history`: a History, or a callable returning the histories to record into now."""

    def __init__(self, history: History | Callable[[], Iterable[History]]):
        self._histories = history if callable(history) else (lambda: [history])
        self._lock = threading.Lock()
        # id -> (its start entry's value, its times, monotonic expiry or None)
        self._open: dict[str, tuple[dict, dict, float | None]] = {}
        # Held from a fault's add until its start is recorded, and by the follower while it
        # reads fault_added events: an event of the nemesis's own add is then always seen
        # with the id in own_ids (else the follower recorded that start a second time).
        self.adding = threading.Lock()
        self.own_ids: set[str] = set()
        self._seq = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        """An id for an operation the nemesis itself numbers (a kill, a take)."""
        return f"{prefix}-{next(self._seq)}"

    def record(self, type_: str, op: str, target: dict | None = None, *, id: str | None = None,
               **params) -> dict:
        """One nemesis entry in every history; a start is remembered until its end."""
        value = {"op": op, "id": id, "target": dict(target or {}),
                 **{k: v for k, v in params.items() if v is not None}}
        entries = [h.info(NEMESIS, op, value) if type_ == INFO else
                   h.append(NEMESIS, type_, op, value) for h in self._histories()]
        with self._lock:
            if type_ == START and id is not None:
                now = time.monotonic()
                e = entries[0] if entries else {"time": time.time(), "mono": now}
                duration = params.get("duration")
                expires = now + duration if isinstance(duration, (int, float)) else None
                self._open[id] = (value, {"at": e["time"], "mono": e["mono"]}, expires)
            elif type_ == END:
                self._open.pop(id, None)
        return value

    def close(self, op: str, fid: str, by: str, **params) -> bool:
        """Record the end of an open fault, once: False when it was not open (ended and
        recorded already, by whichever of the nemesis, its client or the follower saw the
        end first)."""
        with self._lock:
            opened = self._open.pop(fid, None)
        if opened is None or (opened[2] is not None and opened[2] <= time.monotonic()):
            return False  # not open, or its start's duration already ended it
        self.record(END, op, opened[0]["target"], id=fid, by=by, **params)
        return True

    def _live(self) -> list[tuple[dict, dict, float | None]]:
        """The faults begun and not ended (ones whose duration passed are dropped)."""
        now = time.monotonic()
        with self._lock:
            for fid in [f for f, (_, _, exp) in self._open.items() if exp is not None
                        and exp <= now]:
                del self._open[fid]
            return list(self._open.values())

    def attach(self, history: History) -> None:
        """A history that starts now (a cluster made later) gets the faults in effect."""
        for value, times, _ in self._live():
            history.append(NEMESIS, START, value["op"], value, **times)

    def in_effect(self) -> list[dict]:
        """The start values of the faults the nemesis began and has not ended."""
        return [v for v, _, _ in self._live()]

    def started(self, fid: str) -> dict | None:
        """The start value of the fault `fid` while it is in effect."""
        return next((v for v in self.in_effect() if v["id"] == fid), None)

    def attempt(self, op: str, target: dict, fn: Callable, **params):
        """Run the act; record it as failed (and re-raise) when it raises."""
        try:
            return fn()
        except Exception as e:
            self.record(FAIL, op, target, error=error_text(e), **params)
            raise
