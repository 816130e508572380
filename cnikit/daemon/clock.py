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
