"""What every cost rule shares: the Rule base, a Finding, and the run's calls as rules read them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
from faultcore.registry import Registry

# kind -> rule class, as registered.
RULES: Registry[type[Rule]] = Registry("cost rule")

# Principals whose calls are not the build's: the kit's own acts outside a request ("") and
# another principal of the account (the nemesis's).
NOT_THE_BUILD = {"", OTHER_PRINCIPAL_KEY}


@dataclass
class Finding:
    kind: str
    subject: str  # what it is about: an ENI, a node
    count: int  # how many wasted calls or lifetimes
    since: float  # the first of them (wall time)
    what: str  # one sentence

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Calls:
    """A run's EC2 calls as the rules read them: the build's own (`records`, in time order,
    injected refusals and other principals' calls left out), the ENIs the nemesis acted on,
    every address a pod was given, node names, the run's time scale, and the calls a
    throttle refused (`throttled`: a fault's answers, but how the build retried them is
    the build's)."""

    records: list[dict] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)  # ENIs the nemesis named
    pod_ips: set[str] = field(default_factory=set)
    nodes: dict[str, str] = field(default_factory=dict)  # instance id -> node name
    scale: float = 1.0  # the run's time scale: upstream's intervals times this
    # Calls a throttle refused, reads included, in time order: {time, action, instance_id,
    # caller}; instance_id is the node the call acted on (else its caller's).
    throttled: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, audit: list[dict], history: list[dict], nodes: dict[str, str],
           scale: float = 1.0, throttled: list[dict] | None = None) -> Calls:
        records = sorted((r for r in audit if not r.get("injected")
                          and r.get("principal", "") not in NOT_THE_BUILD),
                         key=lambda r: r["time"])
        touched: set[str] = set()
        pod_ips: set[str] = set()
        for e in history:
            v = e.get("value") or {}
            if e.get("process") == "nemesis":
                t = v.get("target") or {}
                touched.update(x for x in [t.get("eni"), *(t.get("enis") or ())] if x)
            elif e.get("process") == "client" and e.get("type") == "ok" and e.get("f") == "pod-add":
                pod_ips.add(v.get("ip"))
        return cls(records, touched, pod_ips, nodes, scale,
                   sorted(throttled or [], key=lambda r: r["time"]))


class Rule:
    """One kind of waste. A subclass with a `kind` registers itself by being defined; `why`
    names the upstream incident it comes from; `judge` returns its findings over a run."""

    kind = ""
    why = ""

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.kind:
            RULES.add(cls.kind, cls, cls)

    def judge(self, calls: Calls) -> list[Finding]:
        raise NotImplementedError
