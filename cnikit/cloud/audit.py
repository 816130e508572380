"""The audit log: every mutating EC2 call the gate saw, with its outcome.

A record says when (wall clock), which action, which ENI, the IPs and prefixes involved
(those asked for, or those assigned when the gate picked them), the outcome ("ok" or the
EC2 error code), the region the call was signed for, the principal that made it (the
access key it was signed with: the gate sets CALLER for each request; "" for the kit's own
acts outside a request) and whether a fault answered it (`injected`: the refusal is the
kit's, not EC2's judgement of the call). Bounded, so a long chaos run cannot grow it
without limit.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field

# The principal (access key id) of the request being served: set by the gate's entry point,
# read by every AuditLog.add of that request.
CALLER: ContextVar[str] = ContextVar("cnikit_audit_caller", default="")
# The access key of another principal of the account (an operator's console, another node's
# sweep: the nemesis signs those acts with it), as the audit records it.
OTHER_PRINCIPAL_KEY = "AKIDOTHERPRINCIPAL"


@dataclass(frozen=True)
class AuditRecord:
    time: float
    action: str
    eni_id: str | None
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    outcome: str = "ok"
    instance_id: str | None = None
    region: str = ""
    principal: str = ""
    injected: bool = False


@dataclass(frozen=True)
class ThrottledCall:
    """A call, read or mutating, that a throttle fault refused: when, which action, who
    asked (the source address, and the instance the caller named in its header if any) and
    the instance it acted on (cnikit.cloud.acted_on), so that retries for one node can be
    told apart from another's, whichever process made them."""

    time: float
    action: str
    source: str | None
    named: str | None = None
    acted_on: str | None = None


class AuditLog:
    def __init__(self, maxlen: int = 200_000):
        self._records: deque[AuditRecord] = deque(maxlen=maxlen)
        self._throttled: deque[ThrottledCall] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def throttle(self, action: str, source: str | None, named: str | None = None,
                 acted_on: str | None = None) -> None:
        rec = ThrottledCall(time.time(), action, source, named, acted_on)
        with self._lock:
            self._throttled.append(rec)

    def throttled(self) -> list[ThrottledCall]:
        with self._lock:
            return list(self._throttled)

    def add(self, action: str, eni_id: str | None = None, ips=(), prefixes=(),
            outcome: str = "ok", instance_id: str | None = None, region: str = "",
            injected: bool = False) -> None:
        rec = AuditRecord(time.time(), action, eni_id, list(ips), list(prefixes), outcome,
                          instance_id, region, CALLER.get(), injected)
        with self._lock:
            self._records.append(rec)

    def records(self) -> list[AuditRecord]:
        with self._lock:
            return list(self._records)

    def to_json(self) -> list[dict]:
        return [asdict(r) for r in self.records()]
