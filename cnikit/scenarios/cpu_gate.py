"""How many scenario runs at once: as many as the cores have room for, not a fixed count.

A run mostly waits on the build's compressed intervals (the matrix: 2.1 s of CPU per run
against 17.6 s of wall), and its CPU comes in bursts: the start (moto's first reset, the
daemons' start-up, the first pods) and the teardown. A fixed count per core leaves cores
idle while every run waits, and overloads them when a few start at once or when the
machine is busy with other work, which makes runs too slow for their time scale.

`CpuGate` admits the next run when the machine's CPU had room over the last moment (idle
at least IDLE_MIN of it, from /proc/stat: the whole machine, other jobs included; at 30 %
the matrix left a quarter of the cores unused), at most one start per START_GAP (a run's
start is its costliest second, and its load shows in the idle figure only once it is under
way), never more than the limit (`--jobs`) at once, and always one run per core (as many
as the limit allows) whatever the idle figure says: a run uses a seventh of a core on
average, so that many never overload the machine, and one that is busy with other work
still makes progress (at one in all, a busy CI runner held a 2-run matrix at one run for
90 s).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

IDLE_MIN = 0.2  # of the machine's CPU time over the last WINDOW_S
WINDOW_S = 1.0
# A run's start costs about 0.6 s of CPU since the daemon is forked warm (0.9 s before):
# one start every 0.4 s keeps starts to three quarters of a core of the two the matrix
# was measured on. At 0.75 s, admissions alone took 95 s of the matrix's 127 runs.
START_GAP_S = 0.4


def cpu_times() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine since boot."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return idle, sum(fields[:8])  # guest time is already counted in user


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuGate:
    def __init__(self, limit: int, idle_min: float = IDLE_MIN, gap: float = START_GAP_S,
                 window: float = WINDOW_S, times: Callable[[], tuple[float, float]] = cpu_times,
                 clock: Callable[[], float] = time.monotonic, floor: int | None = None):
        self.limit, self.idle_min, self.gap, self.window = limit, idle_min, gap, window
        self.floor = max(1, min(limit, cores() if floor is None else floor))
        self._times, self._clock = times, clock
        self._samples: list[tuple[float, float, float]] = []  # (when, idle, total)
        self._last_start = float("-inf")
        self.peak = 0  # the most runs it had at once (for the record)

    def idle(self) -> float | None:
        """The idle share of the machine's CPU over the last window (None: not known yet)."""
        now = self._clock()
        self._samples.append((now, *self._times()))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.pop(0)
        (t0, i0, n0), (t1, i1, n1) = self._samples[0], self._samples[-1]
        if t1 - t0 < self.window / 2 or n1 <= n0:
            return None
        return (i1 - i0) / (n1 - n0)

    def admit(self, running: int) -> bool:
        """Whether one more run may start now, `running` being under way."""
        idle = self.idle()
        if running >= self.limit:
            return False
        now = self._clock()
        spaced = now - self._last_start >= self.gap
        ok = running == 0 or (spaced and running < self.floor) or (
            spaced and idle is not None and idle >= self.idle_min)
        if ok:
            self._last_start = now
            self.peak = max(self.peak, running + 1)
        return ok
