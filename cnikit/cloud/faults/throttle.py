from __future__ import annotations

import threading
from collections import deque

from cnikit.cloud.ec2_actions import is_read
from cnikit.cloud.faults.base import (
    Call,
    Chaos,
    Ec2Error,
    Ec2Fault,
    Param,
    choice,
    number,
    optional,
)

REFUSALS_KEPT = 100_000


def _draw(rng) -> dict:
    """Random chaos's throttle: most often a share of every call refused; one in three the
    account's bucket (every node and action, 1-4 calls/s, a burst of 2-6), as when every node
    of a cluster restarted at once (upstream 873/617)."""
    if rng.random() < 1 / 3:
        rate = round(rng.uniform(1.0, 4.0), 1)
        return {"probability": 1.0, "scope": "account", "rate": rate,
                "burst": round(rng.uniform(2.0, 6.0), 1)}
    return {"probability": round(rng.uniform(0.2, 0.8), 2)}


def category(action: str) -> str:
    """EC2's throttling category of the action: reads and mutating actions each have their
    own bucket per account (API request throttling in the EC2 API reference)."""
    return "non-mutating" if is_read(action) else "mutating"


class Throttle(Ec2Fault):
    """`RequestLimitExceeded` (503). With `rate` (requests per second, `burst` defaulting to
    the rate), a token bucket: calls beyond the rate are throttled (then `probability`
    applies to those); without `rate`, every call is a candidate. `scope` says what shares
    one bucket: `action` (one per action), `category` (reads, mutating actions: EC2's
    categories) or `account` (one bucket for every call of every node: the account's, as
    when every node restarted at once, upstream 873/617)."""

    kind = "throttle"
    stage = "request"
    order = 10  # first: a throttled call is refused before it could fail otherwise
    params = {
        "rate": Param(optional(number(0, None, lo_open=True)), None, help="calls per second"),
        "burst": Param(optional(number(0, None, lo_open=True)), None,
                       help="bucket size (default: the rate)"),
        "scope": Param(choice("action", "category", "account"), "action",
                       help="what shares one bucket: action, category or account"),
    }
    description = ("RequestLimitExceeded (503), beyond `rate` calls/s (`burst`) when given, "
                   "one bucket per `scope` (action, category, account)")
    chaos = Chaos(rank=1, draw=lambda rng: _draw(rng))

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._refused: deque[float] = deque(maxlen=REFUSALS_KEPT)  # monotonic times
        self._count_lock = threading.Lock()

    def bucket(self, action: str) -> str:
        if self.scope == "account":
            return "*"
        return category(action) if self.scope == "category" else action

    def applies(self, call: Call) -> bool:
        if self.rate is None:
            return True
        cap = self.burst or self.rate
        key = self.bucket(call.action)
        tokens, last = self._buckets.get(key, (cap, call.now))
        tokens = min(cap, tokens + (call.now - last) * self.rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, call.now)
            return False
        self._buckets[key] = (tokens, call.now)
        return True

    def apply(self, call: Call) -> Ec2Error:
        with self._count_lock:
            self._refused.append(call.now)
        return Ec2Error("RequestLimitExceeded", "Request limit exceeded.", status=503)

    def refused_since(self, since: float = 0.0) -> int:
        """Calls this fault refused at or after `since` (time.monotonic())."""
        with self._count_lock:
            return sum(1 for t in self._refused if t >= since)
