"""Another tenant of the subnet takes what a node releases, the moment EC2 frees it.

The scenarios where EC2 gives a node's released addresses to another interface (upstream
3019's class) took them after the release's answer reached the build. A build that assigned
the same addresses again at once won that race on a busy machine (CI, 2 of 5 runs of
release-answer-lost: EC2 handed the address back to the node, a new pod got it, and the
reconcile then swept it from under that pod), so the fault missed the build or showed
another bug. Hung on the gate's after-call hook point (cnikit.cloud.after_call), as crash
points are, the take runs once the release took effect and before its answer leaves: no
build can have the addresses back first, however fast.

A release whose answer a fault replaces with an error (`lost-response`) took effect all the
same, so what counts is EC2's ownership after the call, not its status: every address the
call named that no interface holds is taken.
"""

from __future__ import annotations

import logging
import threading
import time

from cnikit.cloud.after_call import AnsweredCall
from cnikit.cloud.query import list_param

log = logging.getLogger("cnikit.cluster.nemesis")

RELEASE = "UnassignPrivateIpAddresses"


class TakeOnRelease:
    """Armed until closed: each release from `eni` hands what it freed to `taker` (the
    nemesis's take_ips, recorded as every take is). `taken`: the addresses taken so far;
    `first_at`: when (wall clock) EC2 freed the first of them, the start of any window the
    build's view of a release is timed from (what the scenario sees later is later still on a
    busy machine)."""

    def __init__(self, nemesis, eni: str, taker: str):
        if nemesis.cloud is None:
            raise ValueError("this nemesis has no EC2 gate")
        self.eni, self.taker = eni, taker
        self.taken: list[str] = []
        self.first_at: float | None = None
        self._handled: set[str] = set()  # taken, or tried and refused
        self._nemesis = nemesis
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._after = nemesis.cloud.gate.after
        self._hook: int | None = self._after.add(self._on_call)

    def _on_call(self, call: AnsweredCall) -> None:
        if call.action != RELEASE or call.params.get("NetworkInterfaceId") != self.eni:
            return
        named = list_param(call.params, "PrivateIpAddress")
        owners = self._nemesis.cloud.gate.owners().ips
        free = [ip for ip in named if owners.get(ip) is None]
        at = time.time()
        with self._lock:
            if self._hook is None or not free:
                return
            try:
                self._nemesis.take_ips(self.taker, free)
                self.taken += free
                self.first_at = self.first_at or at
            except Exception as e:  # noqa: BLE001 - recorded by the nemesis as a failed take
                log.warning("could not take %s: %s", free, e)
            finally:
                self._handled.update(free)
                self._done.notify_all()

    def close(self, expect=(), timeout: float = 10.0) -> list[str]:
        """Disarm; what was taken. `expect`: addresses released from the ENI already, whose
        take may still be under way or queued (EC2 shows a release before its hooks run):
        waited for, up to timeout, first."""
        expect = set(expect)
        with self._lock:
            if self._hook is not None:
                self._done.wait_for(lambda: expect <= self._handled, timeout)
                self._after.remove(self._hook)
                self._hook = None
            return list(self.taken)

    def __enter__(self) -> TakeOnRelease:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
