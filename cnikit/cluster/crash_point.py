"""Crash points: kill a node's daemon when the gate serves a given EC2 call from it.

Upstream #66 (fixed by #74) and #401: a daemon restarted between CreateNetworkInterface /
AttachNetworkInterface and its datastore update lost the ENI for good. A kill at a random
moment almost never lands in that window of a few milliseconds; the gate sees the call, so
it makes the window exact: the call takes effect, the daemon is SIGKILLed, and only then
does the answer leave (cnikit.cloud.after_call), so the daemon cannot have recorded it.

The actions a crash point can follow are CRASH_ACTIONS: after an attach (the ENI is on the
node, not in the datastore), between a detach and the delete that should follow it, after
an assign (the addresses are on the ENI, no pod has them, the ADD never answered), and the
other steps of an ENI's or an address's life. Only a successful call from the node's own
instance fires it (the gate tells the caller by its source address or its
X-Cnikit-Instance-Id header), once.
"""

from __future__ import annotations

import signal
import threading

from cnikit.cloud.after_call import AnsweredCall

CRASH_ACTIONS = ("CreateNetworkInterface", "AttachNetworkInterface", "DetachNetworkInterface",
                 "DeleteNetworkInterface", "AssignPrivateIpAddresses",
                 "UnassignPrivateIpAddresses")


class CrashPoint:
    """Armed until it fires once or is closed. `wait(timeout)` -> what it fired on (a dict:
    action, eni, node, instance_id) or None; `fired` likewise without waiting. Both say so
    only once the kill is done and recorded: a caller that restarts the daemon as soon as it
    sees the point fired must not race the kill (CI: the restart came first, and the kill
    then hit the restarted daemon as a second kill of a node already down, unrecorded)."""

    def __init__(self, nemesis, node: int, action: str):
        if action not in CRASH_ACTIONS:
            raise ValueError(f"no crash point after {action!r}: one of "
                             f"{', '.join(CRASH_ACTIONS)}")
        if nemesis.cloud is None:
            raise ValueError("this nemesis has no EC2 gate")
        self.node, self.action = node, action
        self.instance_id = nemesis.node_target(node)["instance_id"]
        self.fired: dict | None = None
        self._hit: dict | None = None  # what it fired on, from the moment it did
        self._nemesis = nemesis
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._after = nemesis.cloud.gate.after
        self._hook = self._after.add(self._on_call)

    def _on_call(self, call: AnsweredCall) -> None:
        if not (call.ok and call.action == self.action and call.instance_id == self.instance_id):
            return
        with self._lock:
            if self._hit is not None or self._hook is None:
                return
            self._hit = hit = {
                "node": self.node, "instance_id": self.instance_id, "action": call.action,
                **{k: v for k, v in (("eni", call.params.get("NetworkInterfaceId")),
                                     ("attachment", call.params.get("AttachmentId"))) if v}}
            self._after.remove(self._hook)
            self._hook = None
        try:  # kill_daemon tells the nemesis's watcher first (on_down)
            self._nemesis.kill_daemon(self.node, signal.SIGKILL, after_call=call.action,
                                      **({"eni": hit["eni"]} if "eni" in hit else {}))
        finally:
            self.fired = hit
            self._done.set()

    def wait(self, timeout: float) -> dict | None:
        self._done.wait(timeout)
        return self.fired if self._done.is_set() else None

    def close(self, timeout: float = 30.0) -> dict | None:
        """Disarm (a fired point is already disarmed). What it fired on, once a kill in
        progress is done (up to timeout); None when it never fired."""
        with self._lock:
            if self._hook is not None:
                self._after.remove(self._hook)
                self._hook = None
            hit = self._hit
        return None if hit is None else self.wait(timeout)

    def __enter__(self) -> CrashPoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
