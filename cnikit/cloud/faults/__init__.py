"""EC2 faults: small named values added and removed at run time (Toxiproxy style).

Each kind is one class in its own file in this package, on faultcore's fault model (the
fault IMDS's kinds share it, and the spec's shape): an optional `target` naming an `action`
(unset: all actions) and a `region` (unset: every region; else only calls signed for it),
a `probability` (0..1, default 1, rolled in `Fault.fires`) and an optional `duration`
after which the fault expires by itself. Every module here is imported below, so adding a
kind, or a stage (`KINDS.add_stage`), is adding its file. The kinds are the registry's
(`KINDS`, base.py; `GET /_cnikit/kinds` lists them with their stages and attributes); see
base.py for the stages and the gate's hook points that run them.

None of them applies to the fault IMDS's own calls (faultcore.caller, read by the gate, cnikit.cloud.gate.server):
IMDS staleness is modelled by the IMDS's fault kinds, not by the EC2 API's.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque

from cnikit.cloud.errors import Ec2Error
from cnikit.cloud.faults.base import (
    AFTER,
    BEFORE,
    DESCRIBE,
    KINDS,
    MAX_LAG_S,
    TRANSITION,
    Call,
    Ec2Fault,
)
from cnikit.errors import UsageError
from faultcore.errors import SpecError

KINDS.discover(__name__)

__all__ = ["KINDS", "MAX_LAG_S", "Ec2Fault", "FaultSet"]

EVENTS_KEPT = 10_000


class FaultSet:
    """The live faults of one gate; thread-safe (the Python API runs in other threads)."""

    def __init__(self, seed: int | None = None):
        self._faults: dict[str, Ec2Fault] = {}
        self._ordered: dict[str, list[Ec2Fault]] = {stage: [] for stage in KINDS.stages}
        self._lock = threading.Lock()
        self._next = 0
        self.rng = random.Random(seed)
        # id -> calls its target covered (fired or not), kept after the fault ends: what of
        # a run's EC2 faults reached the build (cnikit.check.exposure).
        self._reached: dict[str, int] = {}
        # Every add, removal and expiry, as the fault IMDS's events: what `cnikit up`'s
        # nemesis follows (a list polled now and then misses a fault added and removed
        # between two polls, and cannot tell an expiry from a removal).
        self._events: deque[dict] = deque(maxlen=EVENTS_KEPT)
        self._seq = 0

    def add(self, kind: str, target: dict | None = None, duration: float | None = None,
            **attrs) -> str:
        """Validate and add a fault (the spec as `fault_imds.client.FaultClient.add` takes
        it); its id. UsageError (nothing added) on a bad spec."""
        spec = {"kind": kind, **attrs}
        if target is not None:
            spec["target"] = target
        if duration is not None:
            spec["duration"] = duration
        return self.add_spec(spec)

    def add_spec(self, spec: dict) -> str:
        """Validate and add a fault from its JSON spec; its id. UsageError (nothing added)."""
        with self._lock:
            fid = f"ec2f-{self._next + 1}"
            if isinstance(spec, dict):  # a kind in an old spelling is taken, with a warning
                spec = {**spec, "kind": KINDS.by_name.respelled(spec.get("kind"))}
            try:
                fault = Ec2Fault.from_spec(spec, fid, time.monotonic(), time.time())
            except SpecError as e:
                raise UsageError(str(e)) from None
            self._next += 1
            self._faults[fid] = fault
            self._event("fault_added", fault)
            self._reindex()
        return fid

    def remove(self, fault_id: str) -> bool:
        with self._lock:
            self._expire(time.monotonic())
            fault = self._faults.pop(fault_id, None)
            if fault is not None:
                self._event("fault_removed", fault)
            self._reindex()
            return fault is not None

    def clear(self) -> list[str]:
        """Remove every fault; the ids of those that were active."""
        with self._lock:
            self._expire(time.monotonic())
            ids = list(self._faults)
            for fault in self._faults.values():
                self._event("fault_removed", fault)
            self._faults.clear()
            self._reindex()
            return ids

    def get(self, fault_id: str) -> Ec2Fault | None:
        """The live fault of that id (None: never added, removed or expired); e.g. a
        throttle's refused_since()."""
        with self._lock:
            self._expire(time.monotonic())
            return self._faults.get(fault_id)

    def list(self) -> list[dict]:
        with self._lock:
            self._expire(time.monotonic())
            return [f.to_json() for f in self._faults.values()]

    def events(self, since: int = 0) -> list[dict]:
        """{"seq", "time", "type" (fault_added, fault_removed, fault_expired), "fault"}
        after seq `since`, oldest first: the fault IMDS's fault events, in its shape."""
        with self._lock:
            self._expire(time.monotonic())
            return [e for e in self._events if e["seq"] > since]

    def _event(self, type_: str, fault: Ec2Fault) -> None:
        self._seq += 1
        self._events.append({"seq": self._seq, "time": time.time(), "type": type_,
                             "fault": fault.to_json()})

    def reached(self) -> dict[str, int]:
        """Fault id -> how many calls its target covered while it was active."""
        with self._lock:
            return dict(self._reached)

    def _reindex(self) -> None:
        ordered = sorted(self._faults.values(), key=KINDS.order_key)
        self._ordered = {s: [f for f in ordered if f.stage == s] for s in KINDS.stages}

    def _expire(self, now: float) -> None:
        gone = [fid for fid, f in self._faults.items() if f.expired(now)]
        for fid in gone:
            self._event("fault_expired", self._faults.pop(fid))
        if gone:
            self._reindex()

    def _firing(self, stage: str, call: Call) -> list[Ec2Fault]:
        """The stage's faults that act on this call, in order (lock held)."""
        self._expire(call.now)
        faults = self._ordered.get(stage, ())
        for f in faults:
            if f.target_matches(call):
                self._reached[f.id] = self._reached.get(f.id, 0) + 1
        return [f for f in faults if f.fires(call, self.rng)]

    def run_hook(self, hook: str, action: str, region: str | None = None,
                 params: dict[str, str] | None = None) -> Call:
        """The one place a hook point's stages run: each stage registered at `hook`, in
        order, on its firing faults; the Call carries what they decided."""
        call = Call(action, time.monotonic(), self.rng, region, params)
        if not self._faults:
            return call
        with self._lock:
            for stage in KINDS.at(hook):
                stage.run(self._firing(stage.name, call), call)
        return call

    async def before_call(self, action: str, region: str | None = None,
                          params: dict[str, str] | None = None) -> None:
        """The gate's hook point before a call is served: wait the stages' delay, then raise
        their error (an Ec2Error) if any."""
        if not self._faults:
            return
        call = self.run_hook(BEFORE, action, region, params)
        if call.delay:
            await asyncio.sleep(call.delay)
        if call.error is not None:
            raise call.error

    def on_request(self, action: str, region: str | None = None
                   ) -> tuple[float, Ec2Error | None]:
        """(delay in seconds, error to answer or None) for one call signed for `region`:
        the "before" hook point without the waiting."""
        if not self._faults:
            return 0.0, None
        call = self.run_hook(BEFORE, action, region)
        return call.delay, call.error

    def on_response(self, action: str, region: str | None = None) -> Ec2Error | None:
        """The gate's hook point after a call that changed EC2 succeeded: the error to
        answer instead of its success (which stands), or None."""
        if not self._faults:
            return None
        return self.run_hook(AFTER, action, region).error

    def describe_view(self, region: str | None = None) -> Call:
        """The gate's describe hook point: what this DescribeNetworkInterfaces call shows,
        `lag` (the state's age) and `addresses` (the address lists' lags; base.py)."""
        if not self._faults:
            return Call("DescribeNetworkInterfaces", 0.0, self.rng, region)
        return self.run_hook(DESCRIBE, "DescribeNetworkInterfaces", region)

    def transition_s(self, action: str, region: str | None = None) -> float:
        """The gate's transition hook point, for an Attach or Detach that succeeded: how many
        seconds EC2 shows it "attaching"/"detaching" (0: done at once)."""
        if not self._faults:
            return 0.0
        return self.run_hook(TRANSITION, action, region).settle
