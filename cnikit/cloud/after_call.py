"""The gate's after-call hook point: code that runs once the gate has served a call, before
its answer leaves (what the nemesis's crash points hang on, cnikit.cluster.nemesis).

Why before the answer leaves: a crash point models a daemon killed between an EC2 call
that took effect and the daemon's record of it (upstream #66: a restart between
create/attach and the datastore update lost the ENI). Killed before the answer is
written, the caller cannot have recorded the answer, whatever its speed: the window is
made certain, not raced.

Each hook gets an AnsweredCall: the action, the region, the call's parameters, the status
answered, the calling instance when the gate can tell it (the `X-Cnikit-Instance-Id`
header when the caller sends it, else the instance whose ENI holds the caller's source
address: a node's daemon calls from inside its namespace, from its ENI's address), the
caller's address and port, and the instance the call acted on (`node_instance`,
cnikit.cloud.acted_on; the caller's when the parameters name none). The two differ for a
cluster component (an operator) calling about a node.
Hooks run in a worker thread (a kill may take a moment); a hook that raises is logged and
never changes the answer. With no hook added the gate skips all of it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("cnikit.cloud.gate")

INSTANCE_HEADER = "X-Cnikit-Instance-Id"


@dataclass(frozen=True)
class AnsweredCall:
    action: str
    region: str
    status: int
    instance_id: str | None  # the caller's instance, None when the gate cannot tell
    source: str | None  # the caller's address
    params: dict[str, str] = field(default_factory=dict)
    node_instance: str | None = None  # the instance acted on (else the caller's)
    source_port: int | None = None  # the caller's port: which process holds the connection

    @property
    def ok(self) -> bool:
        return self.status < 400


Hook = Callable[[AnsweredCall], None]


class AfterCall:
    """The hooks run after each answered call; thread-safe (added from any thread)."""

    def __init__(self) -> None:
        self._hooks: dict[int, Hook] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def add(self, hook: Hook) -> int:
        """Run hook(call) after every answered call from now on; its id for remove()."""
        with self._lock:
            hid = next(self._ids)
            self._hooks[hid] = hook
            return hid

    def remove(self, hid: int) -> bool:
        with self._lock:
            return self._hooks.pop(hid, None) is not None

    def __bool__(self) -> bool:
        return bool(self._hooks)

    async def fire(self, call: AnsweredCall) -> None:
        """Run every hook on call in a worker thread; return when all have run."""
        with self._lock:
            hooks = list(self._hooks.values())
        if hooks:
            await asyncio.get_running_loop().run_in_executor(None, _run_all, hooks, call)


def _run_all(hooks: list[Hook], call: AnsweredCall) -> None:
    for hook in hooks:
        try:
            hook(call)
        except Exception:  # noqa: BLE001 - a hook's bug must not change EC2's answer
            log.exception("after-call hook failed on %s", call.action)


def caller_instance(headers, source: str | None, snapshot) -> str | None:
    """The calling instance: the header's, else the holder of the source address (an
    OwnershipSnapshot's ips), else None."""
    named = headers.get(INSTANCE_HEADER) if headers is not None else None
    if named:
        return named
    owner = snapshot.ips.get(source) if source else None
    return owner.instance_id if owner is not None else None
