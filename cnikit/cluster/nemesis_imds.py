"""The fault IMDS's client whose adds and removes are nemesis operations, and why a fault
aimed at an interface that left EC2 is skipped rather than failed."""

from __future__ import annotations

import threading
import time

from cnikit.cluster.nemesis_log import ENDINGS, FAIL, INFO, SKIPPED, START, NemesisLog, error_text
from fault_imds.client import FaultClient, FaultHandle, UnknownTarget


class TargetGone(UnknownTarget):
    """The fault's interface left EC2 between being chosen and the fault (the build freed
    it meanwhile): nothing was injected, and the nemesis recorded a fault-skipped saying
    why. Random chaos moves on; a scenario that aimed at that interface decides (an
    unhandled one makes its run inconclusive, not an error)."""


def departure(cloud, refused: UnknownTarget) -> str | None:
    """Why a refused target is gone: the interface EC2 had and has no longer (EC2 read from
    the gate, never lagged, when there is one), with the call that deleted it from the
    gate's audit. None: not an interface that left (a bad spec, or EC2 has it)."""
    left = refused.departed
    if not left:
        return None
    eni, mac = left.get("eni_id"), left.get("mac")
    if cloud is not None:
        snap = cloud.gate.owners()
        if eni in snap.enis or any(e.mac.lower() == mac for e in snap.enis.values()):
            return None
    ago = max(0.0, time.time() - float(left.get("since") or time.time()))
    why = f"{eni} (mac {mac}) left EC2 {ago:.2f}s before the fault"
    deleted = _deletion(cloud, eni)
    return f"{why} ({deleted})" if deleted else why


def _deletion(cloud, eni: str | None) -> str | None:
    if cloud is None or not eni:
        return None
    calls = [r for r in cloud.gate.audit.records()
             if r.eni_id == eni and r.action == "DeleteNetworkInterface" and r.outcome == "ok"]
    if not calls:
        return None
    return f"DeleteNetworkInterface {time.time() - calls[-1].time:.2f}s before"


class NemesisFaultClient(FaultClient):
    """The fault IMDS's client whose adds and removes are the nemesis's operations: what the
    `imds` fixture and Ctx.imds hand out (every shortcut, stale() to drop(), goes through add).
    `cloud`: the Cloud whose gate says why a refused interface is gone (optional)."""

    def __init__(self, log: NemesisLog, control_url: str, cloud=None):
        super().__init__(control_url)
        self.log, self.cloud = log, cloud

    def add(self, kind: str, target: dict | None = None, duration: float | None = None,
            **attrs) -> FaultHandle:
        """Add and record the fault; one aimed at an interface that left EC2 meanwhile is
        skipped (recorded, TargetGone), never failed."""
        params = {"kind": kind, "duration": duration, **attrs}
        aimed = dict(target or {})
        with self.log.adding:
            return self._add(kind, target, duration, params, aimed, attrs)

    def _add(self, kind, target, duration, params, aimed, attrs) -> FaultHandle:
        try:
            h = super().add(kind, target=target, duration=duration, **attrs)
        except UnknownTarget as e:
            why = departure(self.cloud, e)
            if why is None:
                self.log.record(FAIL, "imds-fault", aimed, error=error_text(e), **params)
                raise
            self.log.record(INFO, SKIPPED, aimed, fault="imds-fault", reason=why, **params)
            raise TargetGone(f"imds {kind} fault skipped: {why}", e.target, e.departed) from None
        except Exception as e:
            self.log.record(FAIL, "imds-fault", aimed, error=error_text(e), **params)
            raise
        # As the IMDS named it: a kind sent in an old spelling is recorded by its name.
        params["kind"] = h.fault.get("kind", kind)
        self.log.record(START, "imds-fault", aimed, id=str(h), **params)
        self.log.own_ids.add(str(h))
        return h

    def remove(self, fid: str) -> bool:
        found = super().remove(fid)
        if not found:  # gone already: it may have ended by itself
            self.await_end(fid, 0)
        self._ended(str(fid))
        return found

    def follow_end(self, fid, timeout: float) -> threading.Thread:
        """await_end in a thread of its own, for a fault that may end by itself before its
        duration (random chaos): its end is recorded as it happens. The IMDS going away
        meanwhile (the run's teardown) ends the wait."""
        def wait() -> None:
            try:
                self.await_end(fid, timeout)
            except Exception:  # noqa: BLE001 - the IMDS stopped: nothing left to record
                pass

        t = threading.Thread(target=wait, name=f"await-end-{fid}", daemon=True)
        t.start()
        return t

    def _last_seq(self) -> int:
        return int(self._ok("GET", f"/events?since={2 ** 62}&wait=0")["last_seq"])

    def await_end(self, fid, timeout: float, look_back: int = 20000) -> dict | None:
        """Wait up to `timeout` s for the fault to end (by itself: fault_ended; or expired,
        removed) and record that end once, as `by: "ended"` with the event's why for one
        that ended by itself; returns the event, or None while it is still active."""
        fid = str(fid)
        seq = self._last_seq()
        if not any(f.get("id") == fid for f in self.list()):
            seq = max(0, seq - look_back)  # it ended before: find how, among recent events
            timeout = 0
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events(seq, wait=max(0.0, min(1.0, deadline - time.monotonic()))):
                seq = max(seq, ev["seq"])
                if (ev.get("fault") or {}).get("id") == fid and ev["type"] in ENDINGS:
                    if ev["type"] != "fault_expired":  # that end is the start's duration
                        self.log.close("imds-fault", fid, ENDINGS[ev["type"]],
                                       why=ev.get("why"))
                    return ev
            if time.monotonic() >= deadline:
                return None

    def clear(self) -> list[str]:
        removed = super().clear()
        for fid in removed:
            self._ended(str(fid))
        return removed

    def _ended(self, fid: str) -> None:
        self.log.close("imds-fault", fid, "removed")
