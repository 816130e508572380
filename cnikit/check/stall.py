"""Whether the machine kept up with a run's time scale: a thread that asks to sleep a short
period and measures how much later than asked it woke.

A run compresses upstream's intervals (at time scale 0.05 a 30 s IP cooldown is 1.5 s), so
a machine that stops running the kit's processes for a second has skipped twenty of
upstream's. What the checkers see then (a prober that could not send, a daemon that ran
late) says nothing about the build. A run whose violations are all of kinds such a machine
can fake (`Checker.timed`: unreachable, early-reuse; liveness) and came within a reconcile
interval after the kit was held off the CPU longer than BOUND_UPSTREAM_S x the time scale
is not judged: it is reported as too slow for its time scale (`too_slow`), never as a violation,
and never judged on a looser bound. A violation that began before any such stall stands.

The other way round, a run without violations that a checker could not judge (a freed
address reused inside its cooldown that the prober never got to probe: Checker.unjudged) is
too slow as well, never `holds`: a busy machine must not pass a build the quiet one fails.
"""

from __future__ import annotations

import threading
import time

PERIOD_S = 0.1  # a tenth of the smallest bound (0.5 s at 0.05): stalls above it are seen
# The bound, in upstream seconds: 0.5 s of the kit's process off the CPU at time scale 0.05.
# Above what a quiet 2-core machine shows, and below the shortest interval a scenario times
# (the IP cooldown, 30 upstream seconds); beside `make test-under-load`'s busy processes the
# kit's process was held off up to 0.58 s.
BOUND_UPSTREAM_S = 10.0
MARGIN_S = 1.0  # a violation this soon before a stall may already be the stall's doing
# How long before the first violation a stall counts: one of upstream's reconcile intervals
# (a daemon that ran late catches up by its next pass).
WINDOW_UPSTREAM_S = 60.0


# What the run engine itself times (a pod that got no IP within its bound, a daemon not
# ready in time); the checkers say it themselves (Checker.timed).
TIMED_BY_THE_ENGINE = ("liveness",)


def _timed(v: dict) -> bool:
    """Whether a late machine can fake this violation: its checker's `timed`, or the
    engine's own (liveness), unless the record says otherwise (a daemon's exit)."""
    from cnikit.check.checkers import CHECKERS

    if (v.get("detail") or {}).get("timed") is False:
        return False
    kind = v["kind"]
    return kind in TIMED_BY_THE_ENGINE or getattr(CHECKERS.get(kind), "timed", False)


class StallMeter:
    def __init__(self, scale: float):
        self.bound = BOUND_UPSTREAM_S * scale
        self.window = WINDOW_UPSTREAM_S * scale
        self.worst = 0.0
        self.stalls: list[tuple[float, float]] = []  # (wall time it began, seconds) > bound
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-meter", daemon=True)

    def start(self) -> StallMeter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            began, wall = time.monotonic(), time.time()
            stopping = self._stop.wait(PERIOD_S)
            # Measured even when stopping: a stop asked during a stall ends the wait at once.
            late = time.monotonic() - began - PERIOD_S
            self.worst = max(self.worst, late)
            if late > self.bound:
                self.stalls.append((wall, late))
            if stopping:
                return

    def too_slow(self, violations: list[dict], started: float) -> str | None:
        """Why a run with these violations cannot be judged, or None: a stall over the bound
        within a reconcile interval before its first violation (or just after its start)."""
        if not self.stalls or not violations:
            return None
        if not all(_timed(v) for v in violations):
            return None  # a violation of state stands, however slow the machine
        first = min(v.get("since") or 0 for v in violations)
        window = [(t, s) for t, s in self.stalls
                  if first - self.window <= t <= first + MARGIN_S]
        if not window:
            return None
        t, s = max(window, key=lambda x: x[1])
        return (f"the machine was too slow for the time scale: the kit's process was held "
                f"off the CPU {s:.2f}s at +{t - started:.2f}s, {first - t:+.2f}s before the "
                f"first violation (bound {self.bound:.2f}s, {BOUND_UPSTREAM_S:g} s of "
                f"upstream's time)")


def run_too_slow(meter: StallMeter | None, violations: list[dict], started: float,
                 unjudged: list[str]) -> str | None:
    """Why a run cannot be judged on this machine (its verdict is then inconclusive), or
    None: a stall before its timed violations, or, with no violation, a case a checker
    saw and could not judge."""
    why = meter.too_slow(violations, started) if meter is not None else None
    if why is None and not violations and unjudged:
        more = f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""
        why = f"the machine was too slow for the time scale: {unjudged[0]}{more}"
    return why
