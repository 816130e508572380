"""Time for the daemon's logic: injected, so unit tests drive it without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds: intervals and cooldowns."""

    def wall_ns(self) -> int:
        """Wall-clock nanoseconds: timestamps written to the checkpoint."""

    def sleep(self, seconds: float) -> None:
        """Wait (a fake clock just moves on): used only for upstream's bounded retries."""


def to_wall_ns(clock: Clock, t: float) -> int:
    """A monotonic time of `clock` as wall-clock ns: what a file keeps across a restart."""
    return clock.wall_ns() - int((clock.now() - t) * 1e9)


def from_wall_ns(clock: Clock, ns: int) -> float:
    """A wall-clock ns time a file kept, as a monotonic time of `clock` (never later than
    now: a clock stepped back does not make a cooldown longer)."""
    return clock.now() - max(0.0, (clock.wall_ns() - ns) / 1e9)


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall_ns(self) -> int:
        return time.time_ns()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1000.0):
        self.t = start

    def now(self) -> float:
        return self.t

    def wall_ns(self) -> int:
        return int(self.t * 1e9)

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def sleep(self, seconds: float) -> None:
        self.t += seconds
