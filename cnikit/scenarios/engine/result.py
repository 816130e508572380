"""A run's result (RunResult) and its violations as evidence lines."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cnikit.check.checkers import checker_of
from cnikit.scenarios.engine.outcomes import LIVENESS


@dataclass
class RunResult:
    scenario: str
    description: str
    profile: str  # the target's name (kept for old readers)
    seed: int
    verdict: str  # "holds" | "violation" | "inconclusive" | "error"
    expected: str | None
    seconds: float
    started: float
    target: str = ""  # the target's name
    precondition: str | None = None  # the unmet precondition when inconclusive
    # Set when the machine was too slow for the time scale to judge the run (a stall before
    # its violations, a case a checker could not judge: cnikit.check.stall; a race the
    # scenario lost: TooSlow): the run is inconclusive, its precondition says why.
    too_slow: str | None = None
    # Earlier runs of this one at faster time scales that the machine was too slow for
    # (cnikit.scenarios.engine.adapt): scale, factor, verdict, too_slow, seconds, report.
    attempts: list[dict] = field(default_factory=list)
    exercised: bool = True  # False when inconclusive/error before the build was exercised
    # What of the run's faults reached the build (cnikit.check.exposure.judge).
    exposure: dict = field(default_factory=dict)
    # What the build's EC2 calls wasted (cnikit.check.cost.judge): never part of the verdict.
    cost: list[dict] = field(default_factory=list)
    imds_requests: list[dict] = field(default_factory=list)  # the IMDS's per-request log
    violations: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    imds_events: list[dict] = field(default_factory=list)
    audit: list[dict] = field(default_factory=list)  # the gate's mutating EC2 calls
    daemon_views: dict = field(default_factory=dict)  # node name -> last status
    daemon_events: dict = field(default_factory=dict)  # node name -> decisions it logged
    nodes: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    schedule: list[dict] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    error: str | None = None
    report: dict = field(default_factory=dict)  # kind -> path

    @property
    def ok(self) -> bool:
        return self.verdict == "holds"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def evidence(self, limit: int = 10) -> list[str]:
        """One line per violation, in time order: when (seconds into the run), what, which
        pod and IP. A short list keeps the first of every kind, so it still names every kind
        that broke."""
        out = []
        by_time = sorted(range(len(self.violations)),
                         key=lambda i: (self.violations[i].get("since") or 0, i))
        firsts: dict[str, int] = {}
        for i in by_time:
            firsts.setdefault(self.violations[i]["kind"], i)
        kept = set(list(firsts.values())[:limit])
        kept |= set([i for i in by_time if i not in kept][:limit - len(kept)])
        for v in [self.violations[i] for i in by_time if i in kept]:
            if v["kind"] == LIVENESS:
                out.append(f"+{v['since'] - self.started:.2f}s liveness: {v['subject']} ({v['what']})")
                continue
            out.append(checker_of(v["kind"]).evidence_line(v, self.started))
        if len(self.violations) > limit:
            out.append(f"... and {len(self.violations) - limit} more")
        return out


def _describe(v: dict, pods: dict[str, dict]) -> dict:
    """The violation with its pod, IP and what happened (its checker's Checker.describe; a
    liveness violation is the engine's own)."""
    if v["kind"] != LIVENESS:
        return {**v, **checker_of(v["kind"]).describe(v, pods)}
    d = v.get("detail") or {}
    ev = d.get("evidence") or {}
    what = d.get("what", "") + (f" [{'; '.join(f'{k}: {x}' for k, x in ev.items())}]"
                                if ev else "")
    return {**v, "pod": v["subject"], "ip": None, "what": what}
