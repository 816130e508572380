"""A run's verdict, from what its checkers found, the liveness it recorded and whether the
machine kept up with its time scale."""

from __future__ import annotations

from cnikit.check.history import CLIENT, History
from cnikit.check.stall import StallMeter, run_too_slow
from cnikit.scenarios.engine.result import RunResult, _describe


def judge(result: RunResult, watch, history: History, liveness: list[dict],
          stalls: StallMeter | None = None) -> None:
    """The verdict: an invariant or liveness violation -> "violation" (unless the machine
    was too slow for the time scale just before it: "inconclusive", cnikit.check.stall);
    else a case a checker could not judge on this machine or an unmet precondition ->
    "inconclusive"; else a kit failure -> "error"; else
    "holds"."""
    pods = {}
    entries = history.entries()
    for e in entries:
        if e["process"] == CLIENT and e["type"] == "ok" and e["f"] == "pod-add":
            pods[e["value"]["pod"]] = e["value"]
    inv = watch.invariants if watch is not None else None
    found = [v.to_json() for v in inv.violations()] if inv is not None else []
    seen: set = set()
    liveness = [r for r in liveness if not ((r["subject"], r["detail"]["what"]) in seen
                                            or seen.add((r["subject"], r["detail"]["what"])))]
    result.violations = [_describe(v, pods) for v in found + liveness]
    result.warnings = [v.to_json() for v in inv.warnings()] if inv is not None else []
    result.history = entries
    if stalls is not None:
        result.params["stall"] = {"worst_s": round(stalls.worst, 3),
                                  "bound_s": round(stalls.bound, 3), "over": len(stalls.stalls)}
    slow = run_too_slow(stalls, result.violations, result.started,
                        inv.unjudged() if inv is not None else [])
    if slow:
        result.too_slow = slow
        result.verdict, result.precondition = "inconclusive", slow
    elif result.violations:
        result.too_slow = None  # a scenario's lost race (TooSlow) is outranked by a violation
        result.verdict = "violation"
    elif result.precondition:
        result.verdict = "inconclusive"
    else:
        result.verdict = "error" if result.error else "holds"
    result.exercised = result.verdict in ("holds", "violation")
