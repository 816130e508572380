"""Faults others add over the control APIs (`$CONTROL/faults`, `$GATE/faults`), recorded as
nemesis operations as they come and go (`cnikit up`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from cnikit.cluster.nemesis_log import END, ENDINGS, START
from fault_imds.client import FaultClient

if TYPE_CHECKING:
    from cnikit.cluster.nemesis import Nemesis


class Follower:
    """Turns the fault IMDS's and the gate's fault events into nemesis entries, one record
    shape for both: a start with the fault's target and parameters, an end with `by`
    (removed, expired). Only faults others add: the nemesis records its own."""

    KEPT_OUT = ("id", "kind", "target", "duration", "created", "expires")

    def __init__(self, nemesis: Nemesis, interval: float):
        self.n, self.interval = nemesis, interval
        self._stop = threading.Event()
        self._seq = {"imds-fault": 0, "ec2-fault": 0}  # the last event seen of each API
        self._followed: set[str] = set()  # ids this follower started: it ends only those
        self._thread = threading.Thread(target=self._loop, name="nemesis-follower", daemon=True)

    def _sources(self) -> list[tuple[str, Callable[[int, float], list[dict]]]]:
        """(op, events(since, wait)) of each fault API the nemesis has."""
        out: list[tuple[str, Callable[[int, float], list[dict]]]] = []
        if self.n.imds is not None:
            out.append(("imds-fault",
                        lambda since, wait: FaultClient.events(self.n.imds, since, wait=wait)))
        if self.n.ec2 is not None:
            out.append(("ec2-fault", lambda since, wait: self.n.ec2.faults.events(since)))
        return out

    def start(self) -> Follower:
        for op, events in self._sources():  # only what is added from now on
            self._seq[op] = max((e["seq"] for e in events(0, 0)), default=0)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a part going down at teardown; try again
                self._stop.wait(self.interval)

    def poll(self) -> None:
        """One round: each API's fault events since the last; the IMDS's long poll (up to
        interval) paces the rounds, else a wait of interval."""
        if self.n.imds is None:
            self._stop.wait(self.interval)
        for op, events in self._sources():
            got = events(self._seq[op], self.interval)
            # Under the nemesis's add lock: an add of its own whose event is here has
            # recorded its start and its id (never recorded twice).
            with self.n.adding:
                for ev in got:
                    self._seq[op] = max(self._seq[op], ev["seq"])
                    self._follow(op, ev)

    def _follow(self, op: str, ev: dict) -> None:
        fault = ev.get("fault") or {}
        fid, target = str(fault.get("id")), fault.get("target") or {}
        kind = ev.get("type")
        if kind == "fault_added" and fid not in self.n.own_ids:
            self._followed.add(fid)
            self.n.record(START, op, target, id=fid, via="control-api", **self._params(fault))
        elif kind == "fault_ended":
            # Ended by itself (any fault, the nemesis's own too): nobody removed it, so
            # only this event tells the history; recorded once (NemesisLog.close).
            self._followed.discard(fid)
            self.n.close(op, fid, ENDINGS[kind], why=ev.get("why"))
        elif kind in ("fault_removed", "fault_expired") and fid in self._followed:
            self._followed.discard(fid)
            self.n.record(END, op, target, id=fid, by=ENDINGS[kind])

    def _params(self, fault: dict) -> dict:
        return {"kind": fault.get("kind"), "duration": fault.get("duration"),
                **{k: v for k, v in fault.items() if k not in self.KEPT_OUT}}
