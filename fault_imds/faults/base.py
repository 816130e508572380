"""The IMDS fault family: its targets, its stages, and what each stage hands a kind.

The model itself (duration, the one probability roll, jitter, validation, the registry) is
faultcore's, shared with the EC2 gate's faults. A kind is one class in its own file in this
package (discovered by `fault_imds.faults`), declaring its `stage` and `order`, its
`params` (each with its check, default and help: the control API, GET /kinds and
`fault-imds add`'s options read them) and, when random chaos may draw it, its `chaos`.

Stages are registered here (`KINDS.add_stage`); a new one is one more registration, in this
file or in a module of its own in this package. The server calls two hook points, each from
one place, and runs every stage registered at it:
- hook "view" (fault_imds/engine.py, `Engine.recompute`): what is served is recomputed from
  EC2; each stage's `run(faults, view)` edits the view. The "content" stage: kinds (stale,
  missing, lag) change WHAT is served (`apply(view)`); deterministic (no probability).
- hook "request" (fault_imds/handler.py, through `Engine.request_stage`): a request is
  about to be answered; each stage's `async run(faults, req)` returns an Answer, DROP or
  None (go on), the first stage that answers wins. The "request" stage: kinds (drop,
  token, latency, error) change HOW a request is answered (`async apply(req) -> Answer |
  Drop | None`, the first that answers wins); an Answer may carry a body (`req.served()`
  is what would be served otherwise). Each matching fault fires with its probability,
  rolled in `faultcore.fault.Fault.fires`, lazily: after a fault answered, the later ones
  are not rolled.
Within a stage, faults run by their kind's `order` (lower first), then in creation order.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from fault_imds.tree import MACS, mac_of_path
from faultcore.errors import SpecError
from faultcore.fault import REQUIRED, Chaos, Fault, Kinds, Param, choice, integer, number
from faultcore.stage import Stage

__all__ = [
    "DROP", "KINDS", "REQUEST", "REQUIRED", "VIEW", "Answer", "Chaos", "Drop", "ImdsFault",
    "Param", "Resolver", "SpecError", "Stage", "Target", "UnknownTarget", "choice",
    "integer", "number", "parse_target",
]

TARGET_KEYS = ("instance_id", "mac", "eni_id", "path", "ips")


class UnknownTarget(SpecError):
    """The spec names an instance or an interface EC2 does not have (never had, or no
    longer: an ENI deleted since the caller chose it). The control API says which, so a
    caller can tell a target gone meanwhile from a bad spec."""

    def __init__(self, field: str, value: str):
        super().__init__(f"unknown target {field} {value!r}")
        self.field, self.value = field, value
        self.departed: dict[str, Any] | None = None

    def left_ec2(self, eni_id: str, mac: str, since: float) -> None:
        """The interface was in EC2 until `since` (wall clock): it left after the caller
        chose it, and the reason says so."""
        self.departed = {"eni_id": eni_id, "mac": mac, "since": since}
        self.args = (f"{self.args[0]}: {eni_id} (mac {mac}) is no longer in EC2",)


@dataclass(frozen=True)
class Target:
    """Which requests or entries a fault touches. Unset fields match everything.

    `mac` and `eni_id` name the same ENI: the spec may give either, both are filled in.
    `path` is a glob over the request path without the leading slash
    (`latest/meta-data/network/interfaces/macs/*/local-ipv4s`; `*` crosses `/`).
    `ips` are IPv4 or IPv6 addresses or prefixes (`10.0.1.16/28`, `2600:1f18::5`,
    `2600:1f18:0:1:1::/80`) in local-ipv4s / ipv4-prefix / ipv6s / ipv6-prefix, kept in
    RFC 5952 text (as the tree serves them), so any spelling of an address matches.
    """

    instance_id: str | None = None
    mac: str | None = None
    eni_id: str | None = None
    path: str | None = None
    ips: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in TARGET_KEYS:
            v = getattr(self, k)
            if v is not None:
                out[k] = list(v) if k == "ips" else v
        return out

    def path_matches(self, path: str) -> bool:
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.mac is not None and not path.startswith(f"{MACS}{self.mac}/"):
            return False
        return True

    def request_matches(self, instance_id: str | None, path: str) -> bool:
        if self.instance_id is not None and instance_id != self.instance_id:
            return False
        if self.mac is not None and mac_of_path(path) != self.mac:
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        return True


def parse_target(raw: Any, resolver: Resolver, allowed: Iterable[str]) -> Target:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"target must be an object, got {type(raw).__name__}")
    allowed = tuple(allowed)
    for k in raw:
        if k not in TARGET_KEYS:
            raise SpecError(f"unknown target field {k!r} (known: {', '.join(TARGET_KEYS)})")
        if k not in allowed:
            raise SpecError(f"target field {k!r} does not apply to this kind")
    for k in ("instance_id", "mac", "eni_id", "path"):
        if k in raw and (not isinstance(raw[k], str) or not raw[k]):
            raise SpecError(f"target {k} must be a non-empty string")
    iid, mac, eni = raw.get("instance_id"), raw.get("mac"), raw.get("eni_id")
    if mac is not None:
        mac = mac.lower()
    if iid is not None and not resolver.has_instance(iid):
        raise UnknownTarget("instance_id", iid)
    if eni is not None:
        eni_mac = resolver.mac_of_eni(eni)
        if eni_mac is None:
            raise UnknownTarget("eni_id", eni)
        if mac is not None and mac != eni_mac:
            raise SpecError(f"target mac {mac} is not the mac of {eni} ({eni_mac})")
        mac = eni_mac
    elif mac is not None:
        eni = resolver.eni_of_mac(mac)
        if eni is None:
            raise UnknownTarget("mac", mac)
    path = raw.get("path")
    if path is not None:
        path = path.lstrip("/")
    ips = raw.get("ips")
    if ips is not None:
        if not isinstance(ips, list) or not ips:
            raise SpecError("target ips must be a non-empty list of IP addresses or prefixes")
        clean = []
        for ip in ips:
            try:
                if not isinstance(ip, str):
                    raise ValueError
                clean.append(
                    str(ipaddress.ip_network(ip)) if "/" in ip else str(ipaddress.ip_address(ip))
                )
            except ValueError:
                raise SpecError(f"target ips: {ip!r} is not an IP address or prefix") from None
        ips = tuple(clean)
        if path is not None:
            raise SpecError("target ips and path cannot be combined")
    return Target(instance_id=iid, mac=mac, eni_id=eni, path=path, ips=ips)


class Resolver:
    """What target validation needs to know about EC2 (filled by the engine)."""

    def has_instance(self, iid: str) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def mac_of_eni(self, eni_id: str) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def eni_of_mac(self, mac: str) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class Answer:
    """A canned HTTP answer a request fault gives instead of the real one: `status` with
    IMDS's error page, or with `body` (text/plain) when one is given."""

    status: int
    headers: dict[str, str] | None = None
    body: bytes | None = None


class Drop:
    """Close the connection without answering."""


DROP = Drop()


# The server's hook points (see the module docstring).
VIEW, REQUEST = "view", "request"


class ContentStage(Stage):
    """Every content fault edits the view, in order."""

    def run(self, faults, view) -> None:
        for f in faults:
            f.apply(view)


class RequestStage(Stage):
    """The firing request faults act in order; the first that answers (or drops) wins."""

    async def run(self, faults, req) -> Answer | Drop | None:
        for f in faults:
            out = await f.apply(req)
            if out is not None:
                return out
        return None


KINDS = Kinds("fault kind")
KINDS.add_stage(ContentStage("content", hook=VIEW,
                             description="what is served: edits of the view built from EC2"))
KINDS.add_stage(RequestStage("request", hook=REQUEST,
                             description="how a request is answered: drop, status, delay, body"))


class ImdsFault(Fault):
    """An IMDS fault: targets IMDS requests and entries (see Target)."""

    family = KINDS
    uses_probability = False  # content kinds; request kinds set True
    targets: ClassVar[tuple[str, ...]] = TARGET_KEYS
    target_fields = ("target",)

    @classmethod
    def parse_target(cls, spec: dict[str, Any], resolver: Resolver | None = None,
                     **_: Any) -> Target:
        return parse_target(spec.get("target"), resolver, cls.targets)

    def target_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json()}

    def target_matches(self, req) -> bool:
        return self.target.request_matches(req.instance_id, req.path)

    @classmethod
    def describe_kind(cls) -> dict[str, Any]:
        return {**super().describe_kind(), "targets": list(cls.targets)}

    # -- hooks of the content stage (see fault_imds/engine.py) ----------------------------

    def start(self, engine) -> None:
        """Called once when the fault is added, before the view is recomputed."""

    def reference_time(self, now: float) -> float | None:
        """A past moment whose EC2 state this fault serves, or None. The engine recomputes
        the view whenever the state at that moment changes (a lag moving on)."""
        return None

    def ends(self, engine) -> str | None:
        """Called on every new EC2 state (engine.true_models updated, before the view is
        recomputed): why the fault ends by itself now (an event, not a duration), or None.
        The engine then removes it and emits `fault_ended` with that why."""
        return None

    # Content kinds implement: apply(self, view) -> None          (see engine.View)
    # Request kinds implement:  async apply(self, req) -> Answer | Drop | None
