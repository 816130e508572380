"""What every fault kind shares: target, duration, probability, validation, the registry.

Two stages (see fault_imds/engine.py for the composition order):
- "content" faults (stale, missing, lag) change WHAT is served. They edit the view built
  from EC2 each time it is recomputed; they are deterministic (no probability).
- "request" faults (drop, token, latency, error) change HOW a request is answered. Each
  matching fault fires with its probability, rolled in one place: `Engine.request_stage`.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from fault_imds.tree import MACS, mac_of_path

TARGET_KEYS = ("instance_id", "mac", "eni_id", "path", "ips")


class SpecError(ValueError):
    """A bad fault spec: the message is one line, shown to the user as is."""


REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """A kind-specific attribute: `check` converts and validates, raising SpecError."""

    check: Callable[[str, Any], Any]
    default: Any = REQUIRED


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False):
    def check(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{name} must be a number, got {v!r}")
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise SpecError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
        if hi is not None and v > hi:
            raise SpecError(f"{name} must be <= {hi:g}, got {v!r}")
        return float(v)

    return check


def integer(lo: int, hi: int):
    def check(name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise SpecError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        return v

    return check


def choice(*options: str):
    def check(name: str, v: Any) -> str:
        if v not in options:
            raise SpecError(f"{name} must be one of {', '.join(options)}, got {v!r}")
        return v

    return check


@dataclass(frozen=True)
class Target:
    """Which requests or entries a fault touches. Unset fields match everything.

    `mac` and `eni_id` name the same ENI: the spec may give either, both are filled in.
    `path` is a glob over the request path without the leading slash
    (`latest/meta-data/network/interfaces/macs/*/local-ipv4s`; `*` crosses `/`).
    `ips` are IPv4 addresses or prefixes (`10.0.1.16/28`) in local-ipv4s / ipv4-prefix.
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
        raise SpecError(f"unknown target instance_id {iid!r}")
    if eni is not None:
        eni_mac = resolver.mac_of_eni(eni)
        if eni_mac is None:
            raise SpecError(f"unknown target eni_id {eni!r}")
        if mac is not None and mac != eni_mac:
            raise SpecError(f"target mac {mac} is not the mac of {eni} ({eni_mac})")
        mac = eni_mac
    elif mac is not None:
        eni = resolver.eni_of_mac(mac)
        if eni is None:
            raise SpecError(f"unknown target mac {mac!r}")
    path = raw.get("path")
    if path is not None:
        path = path.lstrip("/")
    ips = raw.get("ips")
    if ips is not None:
        if not isinstance(ips, list) or not ips:
            raise SpecError("target ips must be a non-empty list of IPv4 addresses or prefixes")
        clean = []
        for ip in ips:
            try:
                if not isinstance(ip, str):
                    raise ValueError
                clean.append(
                    str(ipaddress.IPv4Network(ip)) if "/" in ip else str(ipaddress.IPv4Address(ip))
                )
            except ValueError:
                raise SpecError(f"target ips: {ip!r} is not an IPv4 address or prefix") from None
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
    """A canned HTTP answer a request fault gives instead of the real one."""

    status: int
    headers: dict[str, str] | None = None


class Drop:
    """Close the connection without answering."""


DROP = Drop()


class Fault:
    kind: ClassVar[str]
    stage: ClassVar[str]  # "content" | "request"
    params: ClassVar[dict[str, Param]] = {}
    targets: ClassVar[tuple[str, ...]] = TARGET_KEYS
    uses_probability: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(
        self,
        fid: str,
        target: Target,
        duration: float | None,
        probability: float,
        attrs: dict[str, Any],
        created: float,
        created_wall: float,
    ):
        self.id = fid
        self.target = target
        self.duration = duration
        self.probability = probability
        self.attrs = attrs
        self.created = created
        self.created_wall = created_wall
        self.expires = created + duration if duration is not None else None
        for k, v in attrs.items():
            setattr(self, k, v)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "target": self.target.to_json(),
            "duration": self.duration,
            "created": self.created_wall,
            "expires": (self.created_wall + self.duration) if self.duration is not None else None,
        }
        if self.uses_probability:
            out["probability"] = self.probability
        out.update(self.attrs)
        return out

    # Content faults implement: apply(self, view) -> None          (see engine.View)
    # Request faults implement:  async apply(self, req) -> Answer | Drop | None


REGISTRY: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    REGISTRY[cls.kind] = cls
    return cls
