"""What every checker shares: the Checker base, Violation, the pods as the history tells them.

Checkers are folds over the history that open and close violations, with timestamps. Each
is one module of this package (discovered by `cnikit.check.checkers`), one Checker subclass
with a `kind`: defining it registers it with every run.

Each checker sees every entry in order (`step`), live or replayed from a saved history, and
keeps `open` (violations still holding) and `closed` ones. They read only the history:
  client ok  pod-add {pod, node, instance_id, ip}   pod-delete {pod}
  prober     fail/recover {src, dst, reason}  wrong/right {src, dst, by}  stats {...}
             stale {src, dst (a removed pod), by, ip, after}
  monitor    ownership {full, set: {ip: [instance, eni, primary]}, unset: [ip],
                        prefixes_set: {cidr: [instance, eni]}, prefixes_unset: [cidr]}
             daemon-view {instance_id, ips, assigned: {ip: container}}  daemon-view-error
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

VIOLATION, WARNING = "violation", "warning"
ANCHOR_PREFIX = "@"  # probe targets that are fixed points of the network, never blamed


@dataclass
class Violation:
    kind: str
    subject: str
    since: float
    until: float | None = None
    severity: str = VIOLATION
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


# kind -> checker class, as registered; runs step them by `order` (see Checker).
CHECKERS: dict[str, type[Checker]] = {}


def in_order() -> list[tuple[str, type[Checker]]]:
    """The registered checkers in the order a run steps them: by `order`, then by kind."""
    return sorted(CHECKERS.items(), key=lambda kv: (kv[1].order, kv[0]))


class Checker:
    """A fold over the history. A subclass with a `kind` registers itself by being defined:
    every run then uses it. `step(entry, run)` sees each entry in order; `run` has the live
    pods (`run.pods`, `run.by_ip`) and the other checkers (`run.checker(kind)`). A checker
    that reads another's state at the same entry imports it and takes a larger `order`."""

    kind = ""
    severity = VIOLATION
    order = 100
    # Whether a machine that stops running the kit for a while can fake this violation (a
    # late probe, a late timestamp): then a run judges it only if the machine kept the run's
    # time (cnikit.check.stall). A violation of state (who holds an address) is never timed.
    timed = False

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            CHECKERS[cls.kind] = cls

    def __init__(self, options: dict | None = None) -> None:
        self.options = options or {}
        self.open: dict[str, Violation] = {}
        self.closed: list[Violation] = []

    def step(self, entry: dict, run) -> None:
        raise NotImplementedError

    def _open(self, subject: str, at: float, **detail) -> None:
        v = self.open.get(subject)
        if v is None:
            self.open[subject] = Violation(self.kind, subject, at, None, self.severity, detail)
        else:
            v.detail.update(detail)

    def _close(self, subject: str, at: float) -> None:
        v = self.open.pop(subject, None)
        if v is not None:
            v.until = at
            self.closed.append(v)

    def all(self) -> list[Violation]:
        return self.closed + list(self.open.values())

    def unjudged(self) -> list[str]:
        """What this checker saw happen but could not judge because the machine was too
        slow to observe it (each a sentence): a run without violations but with such a
        case is inconclusive, not `holds` (cnikit.check.stall)."""
        return []


class PodState:
    """Live pods as the history tells them (shared by all checkers)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}  # name -> {node, instance_id, ip}
        self.by_ip: dict[str, set[str]] = {}

    def step(self, e: dict) -> None:
        if e["process"] != "client" or e["type"] != "ok":
            return
        v = e["value"] or {}
        if e["f"] == "pod-add":
            self.pods[v["pod"]] = v
            self.by_ip.setdefault(v["ip"], set()).add(v["pod"])
        elif e["f"] == "pod-delete" and v.get("pod") in self.pods:
            p = self.pods.pop(v["pod"])
            holders = self.by_ip.get(p["ip"], set())
            holders.discard(v["pod"])
            if not holders:
                self.by_ip.pop(p["ip"], None)
