"""How the fault IMDS learns, in-process, how far EC2 has changed.

Real IMDS lags EC2, sometimes for hours, and the fault IMDS plays that only through its
fault kinds (`lag`, `stale`, `missing`). Without one it must answer what EC2 holds when the
request comes. Following EC2 over its API cannot promise that on a busy machine: a change
shows up one Describe round trip later, and with the cores saturated that took a few
hundred ms, long enough for an upstream daemon's reconcile to read an address as gone.

So an EC2 that runs in the IMDS's process (the gate) registers a counter here under its
URL, one that grows before any changing call is answered. The IMDS reads it when a request
comes and answers once its view has read EC2 at or after that count (fault_imds/fence.py).
An EC2 in another process registers nothing: the IMDS then follows it as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_counters: dict[str, Callable[[], int]] = {}
_lock = threading.Lock()


def register(url: str, counter: Callable[[], int]) -> None:
    with _lock:
        _counters[url.rstrip("/")] = counter


def unregister(url: str) -> None:
    with _lock:
        _counters.pop(url.rstrip("/"), None)


def counter_for(url: str) -> Callable[[], int] | None:
    """The change counter of the EC2 at `url`, if it runs in this process."""
    with _lock:
        return _counters.get(url.rstrip("/"))
