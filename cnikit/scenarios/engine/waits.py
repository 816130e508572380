"""Ctx's time, waits and narration (a mixin of cnikit.scenarios.engine.ctx.Ctx)."""

from __future__ import annotations

import time
from collections.abc import Callable

from cnikit.scenarios.engine.outcomes import (
    SCENARIO,
    Liveness,
    NotExposed,
    Precondition,
    ScenarioFailed,
)


class Waits:
    """Time in the run's scale, waits on conditions with deadlines, and the story's steps."""

    # -- time ------------------------------------------------------------------------------

    def run_seconds(self, upstream_seconds: float) -> float:
        """Upstream seconds (an interval as upstream's daemon has it: 60 s reconcile, 30 s
        IP cooldown) in this run's seconds: times the run's time scale (`scale`)."""
        return upstream_seconds * self.scale

    @property
    def ip_cooldown(self) -> float:
        """The IP cooldown the run holds the build to, in run seconds (the watch's)."""
        from cnikit.check.watch import required_ip_cooldown

        return required_ip_cooldown(self.env, self.scale)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def run_for(self, seconds: float) -> None:
        """Let the system run (faults active, daemons working) for a while, watching."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check_progress()
            time.sleep(min(left, 0.1))

    def check_progress(self) -> None:
        """Stop the scenario once the build is caught stuck (a daemon exited by itself):
        the verdict is made, and waiting on a dead build only costs time."""
        if self.sampler is not None and self.sampler.liveness:
            rec = self.sampler.liveness[0]
            raise Liveness(rec["subject"], rec["detail"]["what"], rec["detail"]["evidence"])

    def wait_until(self, pred: Callable[[], object], timeout: float, what: str,
                   poll: float = 0.05):
        end = time.monotonic() + timeout
        last = ""
        while True:
            try:
                v = pred()
            except (OSError, ValueError, KeyError) as e:  # a daemon restarting, say
                v, last = None, f" (last: {type(e).__name__}: {e})"
            if v:
                return v
            self.check_progress()
            if time.monotonic() >= end:
                raise ScenarioFailed(f"timed out after {timeout:.1f}s waiting for {what}{last}")
            time.sleep(poll)

    def precondition(self, pred: Callable[[], object], timeout: float, what: str,
                     poll: float = 0.05):
        """wait_until for what the scenario must set up (steady EC2, room in the subnet):
        unmet -> Precondition (the run is inconclusive, not an error of the kit). For a
        design feature the build may lack, use `design`."""
        try:
            return self.wait_until(pred, timeout, what, poll)
        except (Precondition, Liveness):
            raise
        except ScenarioFailed as e:
            raise Precondition(str(e).replace("timed out", "not met", 1)) from None

    def design(self, pred: Callable[[], object], timeout: float, what: str,
               poll: float = 0.05):
        """wait_until for a design feature the scenario can go on without (addresses
        released to EC2, a second ENI): unmet -> `adapt` and None."""
        try:
            return self.wait_until(pred, timeout, what, poll)
        except (Precondition, Liveness):
            raise
        except ScenarioFailed:
            self.adapt(f"not within {timeout:.1f}s: {what}; the scenario went on without it")
            return None

    def not_exposed(self, why: str):
        """End the scenario: the build has nothing its fault could act on (NotExposed)."""
        raise NotExposed(why)

    def adapt(self, what: str) -> None:
        """The build lacks a design feature the scenario would have waited for (a warm pool,
        reconcile reads of IMDS, releases to EC2): the scenario goes on without it, and the
        run's exposure says so (cnikit.check.exposure)."""
        self.history.info(SCENARIO, "adapt", {"what": what, "t": round(self.elapsed(), 3)})

    # -- narration -------------------------------------------------------------------------

    def step(self, title: str, **focus) -> None:
        """A named step of the story; the demo prints the three views here."""
        entry = {"t": round(self.elapsed(), 3), "title": title, **focus}
        self.steps.append(entry)
        self.history.info(SCENARIO, "step", entry)
        if self.on_step is not None:
            self.on_step(self, title, focus)

