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
                        (both families: IPv6 addresses and /80s beside IPv4 and /28s)
             daemon-view {instance_id, ips, assigned: {ip: container}}  daemon-view-error
             loose-enis {enis: {eni: {was_on, mac, ips}}, detaching: {eni: {...}}}
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, field

from cnikit.check import palette
from faultcore.registry import Registry

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


def canonical_ip(ip):
    """One text per address, so that two spellings of one IPv6 address are one key: RFC
    5952's, which EC2 (the gate) and the kit write, while a build's answers may spell it
    otherwise. IPv4 has one text already; anything not an address is kept as it is."""
    if not isinstance(ip, str) or ":" not in ip:
        return ip
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


# kind -> checker class, as registered; runs step them by `order` (see Checker).
CHECKERS: Registry[type[Checker]] = Registry("checker")


def checker_of(kind: str) -> type[Checker]:
    """The checker class of a violation's kind; the Checker base (its defaults) for a kind
    no checker registered (a checker error, nemesis damage, the engine's liveness)."""
    return CHECKERS.get(kind, Checker)


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
    # Whether the nemesis's own act can cause this violation (an address it took from a pod
    # darkens the pod and leaves it unowned in EC2): then, within the act's window and for
    # the pods it hit, the violation is excused as a `nemesis-damage` warning
    # (cnikit.check.damage). What the build does with an address never is.
    excusable = False
    # How the report draws this checker's violations on a pod's lane (cnikit.report.chart):
    # a colour and the legend's words for it. None: the report's default colour, no legend.
    colour: str | None = None
    legend = ""
    # Drawn over the whole lane with this word on it (a pod lost), not as a strip along the
    # lane's bottom (None).
    lane_word: str | None = None
    # The report's outcome line (cnikit.report.rootcause) names the pods of this checker's
    # violations together with this predicate ("pods p7, p8 went dark"), each pod by the
    # first checker in run order that names it; None: each violation by itself (outcome).
    outcome_predicate: str | None = None
    # What a violation's subject names: "pod" (its IP is the detail's `ip`, else the pod's)
    # or "ip" (the pods holding it are the detail's `pods`). The report reads it to place
    # the violation on the pods' lanes and the IP's story.
    subject_names = "pod"

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            if cls.colour:  # refused here rather than found on a chart (cnikit.check.palette)
                palette.check(cls.colour, f"checker {cls.kind!r}",
                              {c.colour: f"checker {k!r}" for k, c in CHECKERS.items()
                               if c.colour and k != cls.kind})
            CHECKERS.add(cls.kind, cls, cls)

    def __init__(self, options: dict | None = None) -> None:
        self.options = options or {}
        self.open: dict[str, Violation] = {}
        self.closed: list[Violation] = []

    def step(self, entry: dict, run) -> None:
        raise NotImplementedError

    # -- how a violation reads (a run's evidence, the report) -----------------------------
    # Violations reach these as JSON (Violation.to_json, or report.json read back).

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        """The violation's pod, IP and what happened, for its evidence line: {pod, ip, what}.
        `pods`: pod -> its pod-add (node, instance_id, ip). By default the subject is the pod,
        and `what` is the detail's own wording (`what`) or the detail as it is."""
        d = v.get("detail") or {}
        return {"pod": v["subject"], "ip": d.get("ip"),
                "what": d.get("what") or json.dumps(d, default=str)}

    @classmethod
    def evidence_line(cls, v: dict, started: float) -> str:
        """One line of evidence (`cnikit run` prints them): when (seconds into the run), the
        kind, the pod and IP, what happened. `v` is described (describe)."""
        until = "" if v.get("until") is None else f" until +{v['until'] - started:.2f}s"
        return (f"+{v['since'] - started:.2f}s{until} {v['kind']}: pod {v['pod'] or '-'} "
                f"ip {v['ip'] or '-'} ({v['what']})")

    @classmethod
    def symptom(cls, v: dict, ip: str | None) -> str | None:
        """The last link of the report's root-cause chain, the symptom, in a few words ("pod
        p1 (10.0.1.12) went dark"), or None: the detail's own `what` (cnikit.report.cause)."""
        return None

    @classmethod
    def outcome(cls, ip: str | None, pods: list[str], symptom: str) -> str:
        """One violation's part of the report's outcome line when the checker names no pods
        together (outcome_predicate): its symptom's words by default."""
        return symptom

    @classmethod
    def momentary(cls, v: dict) -> bool:
        """Whether the violation is an instant of how this checker attributes blame, gone
        before the next observation could confirm it: the report says so instead of stating
        it as a fault (cnikit.report.summary, cnikit.testkit)."""
        return False

    @classmethod
    def sentence(cls, v: dict, say) -> str | None:
        """The report's sentence for the violation (cnikit.report.summary), or None for the
        report's own: "<kind> on <subject> at +t until +t". `say` reads the run for it
        (cnikit.report.summary.Say): `say.span` ("at +t until +t"), `say.at(t)` ("+t"),
        `say.pod(name)` (with `ip` and `start`, or None), `say.cause(ip, at, since)` (the EC2
        change that took ip away, in words, or None) and `say.root` ("; root cause: ..." or
        "")."""
        return None

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


class EniChecker(Checker):
    """A checker whose violations are about an ENI (its subject), not a pod: no pod or IP
    on the evidence line, only what happened to the ENI."""

    @classmethod
    def describe(cls, v: dict, pods: dict[str, dict]) -> dict:
        d = v.get("detail") or {}
        return {"pod": None, "ip": None, "eni": v["subject"], "what": d.get("what") or ""}

    @classmethod
    def evidence_line(cls, v: dict, started: float) -> str:
        return f"+{v['since'] - started:.2f}s {v['kind']}: {v['what']}"


class PodState:
    """Live pods as the history tells them (shared by all checkers). A pod whose DEL the
    runtime has sent while keeping its sandbox (`pod-deleting`) is set aside, unjudged, as a
    terminating pod is: a DEL that succeeds releases its address before the sandbox goes.
    If that DEL fails (`pod-kept`) the pod is live again."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}  # name -> {node, instance_id, ip}
        self.by_ip: dict[str, set[str]] = {}
        self.deleting: dict[str, dict] = {}

    def step(self, e: dict) -> None:
        if e["process"] != "client" or e["type"] != "ok":
            return
        v, f = e["value"] or {}, e["f"]
        if f == "pod-add":
            self._live(v)
        elif f == "pod-kept" and v.get("pod") in self.deleting:
            self._live(self.deleting.pop(v["pod"]))
        elif f in ("pod-delete", "pod-deleting") and v.get("pod") in self.pods:
            p = self.pods.pop(v["pod"])
            holders = self.by_ip.get(p["ip"], set())
            holders.discard(v["pod"])
            if not holders:
                self.by_ip.pop(p["ip"], None)
            if f == "pod-deleting":
                self.deleting[v["pod"]] = p
        if f == "pod-delete":
            self.deleting.pop(v.get("pod"), None)

    def _live(self, v: dict) -> None:
        if canonical_ip(v["ip"]) != v["ip"]:
            v = {**v, "ip": canonical_ip(v["ip"])}
        self.pods[v["pod"]] = v
        self.by_ip.setdefault(v["ip"], set()).add(v["pod"])
