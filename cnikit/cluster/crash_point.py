"""Crash points: kill the caller when the gate serves a given EC2 call for a node.

Upstream #66 (fixed by #74) and #401: a daemon restarted between CreateNetworkInterface /
AttachNetworkInterface and its datastore update lost the ENI for good. A kill at a random
moment almost never lands in that window of a few milliseconds; the gate sees the call, so
it makes the window exact: the call takes effect, the daemon is SIGKILLed, and only then
does the answer leave (cnikit.cloud.after_call), so the daemon cannot have recorded it.

The actions a crash point can follow are CRASH_ACTIONS: after an attach (the ENI is on the
node, not in the datastore), between a detach and the delete that should follow it, after
an assign (the addresses are on the ENI, no pod has them, the ADD never answered), and the
other steps of an ENI's or an address's life. A successful call that acts on the node's
instance fires it, once (cnikit.cloud.acted_on: the instance the call names, or its ENI's;
a CreateNetworkInterface names none, so only the node's own create fires it).

What it kills is the process that made the call, not the node's daemon as such: the window
is "the caller dies right after EC2 did the thing, before it heard the answer", and only
the caller's record of the answer is lost. A node's daemon calling (its source address or
X-Cnikit-Instance-Id header names its instance) is killed as a daemon; a cluster component
calling about the node (an operator, from the VPC namespace) is killed as a component, and
the node's daemon, which never saw the call, runs on. A call no process of the build made
(the kit's own acts, another principal's) fires nothing.
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
    action, eni, node, instance_id, and `caller`: {"node": n} or {"component": name}, what
    was killed) or None; `fired` likewise without waiting. Both say so
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
        if not (call.ok and call.action == self.action
                and call.node_instance == self.instance_id):
            return
        with self._lock:
            if self._hit is not None or self._hook is None:
                return
        caller = self._caller(call)
        if caller is None:
            return
        with self._lock:
            if self._hit is not None or self._hook is None:
                return
            self._hit = hit = {
                "node": self.node, "instance_id": self.instance_id, "action": call.action,
                **{k: v for k, v in (("eni", call.params.get("NetworkInterfaceId")),
                                     ("attachment", call.params.get("AttachmentId"))) if v},
                "caller": caller}
            self._after.remove(self._hook)
            self._hook = None
        said = {"after_call": call.action, **({"eni": hit["eni"]} if "eni" in hit else {})}
        try:  # kill_daemon tells the nemesis's watcher first (on_down)
            if "component" in caller:
                self._nemesis.kill_component(caller["component"], signal.SIGKILL,
                                             for_node=self.node, **said)
            else:
                self._nemesis.kill_daemon(caller["node"], signal.SIGKILL, **said)
        finally:
            self.fired = hit
            self._done.set()

    def _caller(self, call: AnsweredCall) -> dict | None:
        """The build's process that made the call: {"node": n} for a node's daemon,
        {"component": name} for a cluster component holding the call's connection, None
        for neither."""
        if call.instance_id == self.instance_id:
            return {"node": self.node}
        daemons = self._nemesis.daemons
        if call.instance_id:
            node = daemons.node_of(call.instance_id)
            return None if node is None else {"node": node}
        if not (call.source and call.source_port):
            return None
        name = daemons.component_calling(call.source, call.source_port)
        return {"component": name} if name else None

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
