"""EC2 faults: small named values added and removed at run time (Toxiproxy style).

Each kind is one class registered by name. Every fault has an optional `action` (None: all
actions), a `probability` (0..1, default 1) and an optional `duration` after which it
expires by itself. `FaultSet.on_request` is the one place the probability is rolled.

Kinds:
- `throttle`: `RequestLimitExceeded` (503). With `rate` (requests per second, `burst`
  defaulting to the rate), a token bucket per action: calls beyond the rate are throttled
  (then `probability` applies to those); without `rate`, every call is a candidate.
- `error`: `InternalError` (500) by default, or `code="Unavailable"` (503).
- `latency`: `ms` plus a uniform `jitter_ms` added before the call is served.
- `describe_lag`: DescribeNetworkInterfaces shows the state as it was `seconds` ago (EC2 is
  eventually consistent; at most MAX_LAG_S); read by the gate with `FaultSet.describe_lag()`.

None of them applies to the fault IMDS's own calls (see gate.py): IMDS staleness is
modelled by the IMDS's fault kinds, not by the EC2 API's.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field, fields

from cnikit.cloud.errors import Ec2Error
from cnikit.errors import UsageError

KINDS: dict[str, type[Fault]] = {}
# The gate keeps this much history of its mirror for describe_lag.
MAX_LAG_S = 300.0


def register(cls: type[Fault]) -> type[Fault]:
    KINDS[cls.kind] = cls
    return cls


@dataclass
class Fault:
    kind = ""
    id: str = ""
    action: str | None = None
    probability: float = 1.0
    duration: float | None = None
    created: float = field(default_factory=time.monotonic)

    def validate(self) -> None:
        if not 0 <= self.probability <= 1:
            raise UsageError(f"probability must be in [0, 1], got {self.probability}")
        if self.duration is not None and self.duration <= 0:
            raise UsageError(f"duration must be positive, got {self.duration}")

    def expired(self, now: float) -> bool:
        return self.duration is not None and now - self.created >= self.duration

    def matches(self, action: str) -> bool:
        return self.action is None or self.action == action

    def candidate(self, action: str, now: float) -> bool:
        """Whether this call is subject to the fault before the probability roll."""
        return True

    def effect(self, rng: random.Random) -> Ec2Error | float | None:
        """An error to answer, or seconds of delay, or None."""
        return None

    def describe(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "created"}
        out["kind"] = self.kind
        return out


@register
@dataclass
class Throttle(Fault):
    kind = "throttle"
    rate: float | None = None
    burst: float | None = None
    _buckets: dict = field(default_factory=dict, repr=False)

    def validate(self) -> None:
        super().validate()
        if self.rate is not None and self.rate <= 0:
            raise UsageError(f"rate must be positive, got {self.rate}")

    def candidate(self, action: str, now: float) -> bool:
        if self.rate is None:
            return True
        cap = self.burst or self.rate
        tokens, last = self._buckets.get(action, (cap, now))
        tokens = min(cap, tokens + (now - last) * self.rate)
        if tokens >= 1:
            self._buckets[action] = (tokens - 1, now)
            return False
        self._buckets[action] = (tokens, now)
        return True

    def effect(self, rng):
        return Ec2Error("RequestLimitExceeded", "Request limit exceeded.", status=503)

    def describe(self) -> dict:
        out = super().describe()
        out.pop("_buckets", None)
        return out


@register
@dataclass
class Error(Fault):
    kind = "error"
    code: str = "InternalError"

    STATUS = {"InternalError": 500, "Unavailable": 503, "ServiceUnavailable": 503}

    def validate(self) -> None:
        super().validate()
        if self.code not in self.STATUS:
            raise UsageError(f"error code must be one of {sorted(self.STATUS)}, got {self.code!r}")

    def effect(self, rng):
        message = {
            "InternalError": "An internal error has occurred. Retry your request.",
        }.get(self.code, "The service is unavailable. Retry your request.")
        return Ec2Error(self.code, message, status=self.STATUS[self.code])


@register
@dataclass
class Latency(Fault):
    kind = "latency"
    ms: float = 100.0
    jitter_ms: float = 0.0

    def validate(self) -> None:
        super().validate()
        if self.ms < 0 or self.jitter_ms < 0:
            raise UsageError("ms and jitter_ms must be >= 0")

    def effect(self, rng):
        return (self.ms + rng.uniform(0, self.jitter_ms)) / 1000.0


@register
@dataclass
class DescribeLag(Fault):
    kind = "describe_lag"
    seconds: float = 5.0

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.seconds <= MAX_LAG_S:
            raise UsageError(f"seconds must be in [0, {MAX_LAG_S:.0f}], got {self.seconds}")


class FaultSet:
    """The live faults of one gate; thread-safe (the Python API runs in other threads)."""

    def __init__(self, seed: int | None = None):
        self._faults: dict[str, Fault] = {}
        self._lock = threading.Lock()
        self._next = 0
        self.rng = random.Random(seed)

    def add(self, kind: str, **attrs) -> str:
        cls = KINDS.get(kind)
        if cls is None:
            raise UsageError(f"unknown EC2 fault kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        allowed = {f.name for f in fields(cls) if not f.name.startswith("_")} - {"id", "created"}
        unknown = set(attrs) - allowed
        if unknown:
            raise UsageError(f"unknown field(s) for {kind}: {', '.join(sorted(unknown))}")
        try:
            fault = cls(**attrs)
            numeric = [f.name for f in fields(cls) if f.type in ("float", "float | None")]
            for name in numeric:
                value = getattr(fault, name)
                if value is not None:
                    setattr(fault, name, float(value))
        except (TypeError, ValueError) as e:
            raise UsageError(f"bad {kind} fault: {e}") from None
        fault.validate()
        with self._lock:
            self._next += 1
            fault.id = f"ec2f-{self._next}"
            self._faults[fault.id] = fault
        return fault.id

    def remove(self, fault_id: str) -> bool:
        with self._lock:
            return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[dict]:
        with self._lock:
            self._expire(time.monotonic())
            return [f.describe() for f in self._faults.values()]

    def _expire(self, now: float) -> None:
        for fid in [fid for fid, f in self._faults.items() if f.expired(now)]:
            del self._faults[fid]

    def on_request(self, action: str) -> tuple[float, Ec2Error | None]:
        """(delay in seconds, error to answer or None) for one call."""
        now = time.monotonic()
        delay = 0.0
        error = None
        with self._lock:
            if not self._faults:
                return 0.0, None
            self._expire(now)
            for f in self._faults.values():
                if isinstance(f, DescribeLag) or not self._fires(f, action, now):
                    continue
                effect = f.effect(self.rng)
                if isinstance(effect, float):
                    delay += effect
                elif effect is not None and error is None:
                    error = effect
        return delay, error

    def describe_lag(self) -> float:
        """Seconds of lag for this DescribeNetworkInterfaces call (0: the current state)."""
        now = time.monotonic()
        with self._lock:
            if not self._faults:
                return 0.0
            self._expire(now)
            lags = [f.seconds for f in self._faults.values() if isinstance(f, DescribeLag)
                    and self._fires(f, "DescribeNetworkInterfaces", now)]
        return max(lags, default=0.0)

    def _fires(self, f: Fault, action: str, now: float) -> bool:
        """The one place a fault's action, rate and probability decide (lock held)."""
        return (f.matches(action) and f.candidate(action, now)
                and self.rng.random() < f.probability)
