"""One sentence per violation: what broke, when, for which pod and IP, the EC2 change that
explains it when the record holds one ("... because IP 10.0.1.7 was removed from ENI eni-1 in
EC2 (UnassignPrivateIpAddresses at t=+11.90s)"), and the chain back to the first cause the record
shows ("; root cause: fault IMDS stale ... -> IMDS ... -> the daemon ... -> ...", see
cnikit.report.cause)."""

from __future__ import annotations

from cnikit.check.checkers import checker_of
from cnikit.report.cause import chain, one_line
from cnikit.report.cause_ec2 import ec2_change, ec2_text
from cnikit.report.timeline import Timeline
from cnikit.report.words import rel

__all__ = ["Say", "cause", "momentary", "rel", "root", "sentence", "summarize"]


def momentary(v: dict) -> bool:
    """Blame that opened and closed at one instant (Checker.momentary: the reachability
    checker blames one side of the first failing pair until the next pair shows which pod
    is lost)."""
    return checker_of(v.get("kind") or "").momentary(v)


def _pod(tl: Timeline, name: str):
    return next((p for p in tl.pods if p.name == name), None)


def cause(tl: Timeline, ip: str, at: float, since: float | None = None) -> str | None:
    """The EC2 change that took ip away from the ENI holding it since `since`, in words."""
    c = ec2_change(tl, ip, at, since)
    return ec2_text(tl, c) if c is not None else None


def root(tl: Timeline, v: dict) -> str:
    """"; root cause: <the chain up to the EC2 call>" when the record shows one (the EC2 call,
    its effect and the symptom are said before it)."""
    links = [x for x in chain(tl, v) if x["step"] in ("fault", "imds", "daemon")]
    return "; root cause: " + one_line(tl, links) if links else ""


class Say:
    """What a checker's sentence reads of the run for one violation (Checker.sentence)."""

    def __init__(self, tl: Timeline, v: dict) -> None:
        self.tl, self.v = tl, v
        since, until = v.get("since"), v.get("until")
        self.span = (f"at {rel(tl, since)}"
                     + (f" until {rel(tl, until)}" if until else " (still at the end)"))

    def at(self, t: float | None) -> str:
        return rel(self.tl, t)

    def pod(self, name: str):
        return _pod(self.tl, name)

    def cause(self, ip: str, at: float, since: float | None = None) -> str | None:
        return cause(self.tl, ip, at, since)

    @property
    def root(self) -> str:
        return root(self.tl, self.v)


def sentence(tl: Timeline, v: dict) -> str:
    """The violation in one sentence: its checker's (Checker.sentence), else its kind, its
    subject and when."""
    say = Say(tl, v)
    said = checker_of(v.get("kind") or "").sentence(v, say)
    return said if said is not None else f"{v.get('kind')} on {v.get('subject')} {say.span}"


def summarize(tl: Timeline, verdict: str, violations: list[dict], warnings: list[dict]) -> list[str]:
    lines = [sentence(tl, v) for v in violations]
    if warnings:
        kinds: dict[str, int] = {}
        for w in warnings:
            kinds[w.get("kind", "?")] = kinds.get(w.get("kind", "?"), 0) + 1
        lines.append("warnings: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    if not violations and verdict != "error":
        lines.insert(0, f"every invariant held over {tl.t1 - tl.t0:.1f}s "
                        f"({len(tl.pods)} pods, {len(tl.enis)} ENIs)")
    return lines
