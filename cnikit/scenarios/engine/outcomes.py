"""How a scenario ends other than by running to its end: the exceptions a scenario (or the
kit) raises, each mapped to a verdict by the run (cnikit.scenarios.engine.run)."""

from __future__ import annotations

import time

SCENARIO = "scenario"  # history process of the scenario's own step markers
LIVENESS = "liveness"  # the engine's own violation kind (no checker: the run finds it)


class ScenarioFailed(Exception):
    """The kit could not drive the system where it wanted: the run is an `error` (exit 2),
    a problem of the kit, the machine or the target file, not a verdict on the build."""


class Precondition(ScenarioFailed):
    """The scenario could not set up what its fault needs (free addresses in the subnet, room
    for a pod, a race a busy machine lost every time): the run is `inconclusive`, with `what`
    as RunResult.precondition. A design feature the build lacks is not one: see Ctx.design."""


class TooSlow(Precondition):
    """The machine was too slow for the time scale to set up the scenario's race (no pod
    came back within the IP cooldown of a delete): the run is inconclusive and says so in
    `too_slow`; a violation found meanwhile still stands."""

    def __init__(self, what: str):
        super().__init__(f"the machine was too slow for the time scale: {what}")


class NotExposed(Exception):
    """The build has nothing the scenario's fault could act on (no secondary ENI for IMDS
    to miss, no daemon write to crash in, no address released to take): the scenario ends
    here, the run is still watched and judged, and its exposure says why it was not exposed
    (cnikit.check.exposure). Raised by `ctx.not_exposed`."""


class Liveness(ScenarioFailed):
    """The build made no progress any correct build must make (a pod got no IP within a
    bound, a daemon never became ready): a liveness violation, with evidence."""

    def __init__(self, subject: str, what: str, evidence: dict | None = None):
        super().__init__(f"{subject}: {what}")
        self.subject, self.what, self.evidence = subject, what, dict(evidence or {})

    def record(self, at: float | None = None) -> dict:
        return liveness_record(self.subject, self.what, self.evidence, at)


def liveness_record(subject: str, what: str, evidence: dict | None = None,
                    at: float | None = None, timed: bool = True) -> dict:
    """A violation record of kind "liveness", shaped like the checkers' (cnikit.check).
    `timed`: whether a late machine can fake it (a bound not met; not a daemon's exit)."""
    detail = {"what": what, "evidence": dict(evidence or {})}
    if not timed:
        detail["timed"] = False
    return {"kind": LIVENESS, "subject": subject, "since": time.time() if at is None else at,
            "until": None, "severity": "violation", "detail": detail}

