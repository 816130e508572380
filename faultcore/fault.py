"""What every fault shares, on both sides (fault IMDS and EC2 gate), and the kinds registry.

A fault kind is one small class in its own file. Defining the class registers it: its
family base (`ImdsFault`, `Ec2Fault`) names the family's `Kinds`, and each subclass that
sets `kind` joins it, with where it applies (`stage`) and in which order (`order`, lower
first) declared beside its behaviour. There is no second list to update: the control APIs (validation, GET .../kinds), the
CLIs' options (from `params`), random chaos's draw (`chaos`) and the report's labels all
read the registry. Stages are registered things too (faultcore.stage): a family's `Kinds`
holds its stages, and a server runs the stages of one hook point from one place.

The common model:
- `duration` (seconds, optional): the fault expires by itself (`expires`, `expired`);
- `probability` (0..1, default 1): rolled in one place, `Fault.fires`, after the family's
  target and the kind's own condition matched; kinds that change what is served (content)
  set `uses_probability = False` and accept only 1;
- jitter has one meaning: `ms` plus or minus up to `jitter_ms`, uniform, never below 0
  (`jittered_delay`).
Each family keeps its own targets (`parse_target`, `target_matches`, `target_json`).
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from faultcore.errors import SpecError
from faultcore.registry import Registry
from faultcore.stage import Stage

REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """A kind-specific attribute: `check` converts and validates, raising SpecError; `help`
    says what it means (CLI help, GET .../kinds)."""

    check: Callable[[str, Any], Any]
    default: Any = REQUIRED
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def type(self) -> type:
        """The Python type a command line converts the value to (the check's, else str)."""
        return getattr(self.check, "type", str)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"required": self.required}
        if not self.required:
            out["default"] = self.default
        what = getattr(self.check, "what", "")
        if what:
            out["check"] = what
        if self.help:
            out["help"] = self.help
        return out


def attributes(params: dict[str, Param], spec: dict[str, Any], owner: str) -> dict[str, Any]:
    """Each param's value from a JSON spec, checked, or its default; SpecError (one line)
    when a required one is missing (`owner`: the fault kind or action named in it)."""
    attrs: dict[str, Any] = {}
    for name, param in params.items():
        if name in spec:
            attrs[name] = param.check(name, spec[name])
        elif param.required:
            raise SpecError(f"{owner} needs {name!r}")
        else:
            attrs[name] = param.default
    return attrs


def _no_attrs(rng: random.Random) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Chaos:
    """Whether and how random chaos may draw a kind (a kind without one is never drawn).

    `rank` places it in the draw: random chaos picks uniformly among the drawable kinds of
    a family taken in (rank, name) order, so a seed's schedule depends on that order (a new
    drawable kind changes the schedules of existing seeds; give it the next rank). `draw`
    takes the seeded generator and returns the kind's attributes (and `probability`) for
    one fault, drawing in a fixed order. `aim` says what it is aimed at, for families
    whose target random chaos picks (the IMDS: "instance" or "interface")."""

    rank: float
    draw: Callable[[random.Random], dict[str, Any]] = _no_attrs
    aim: str = "instance"


def _checked(check: Callable[[str, Any], Any], what: str, type_: type):
    check.what = what  # a human description of what the check accepts
    check.type = type_
    return check


# Public for checks declared elsewhere (cnikit.cluster.actions): a check and what it takes.
checked = _checked


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False):
    def check(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{name} must be a number, got {v!r}")
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise SpecError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
        if hi is not None and v > hi:
            raise SpecError(f"{name} must be <= {hi:g}, got {v!r}")
        return float(v)

    bounds = ([f"{'>' if lo_open else '>='} {lo:g}"] if lo is not None else []) + (
        [f"<= {hi:g}"] if hi is not None else [])
    return _checked(check, " ".join(["a number", " and ".join(bounds)]).strip(), float)


def optional(check: Callable[[str, Any], Any]):
    """`check`, or None when the value is null."""
    what = getattr(check, "what", "")
    return _checked(lambda name, v: None if v is None else check(name, v),
                    f"{what}, or null" if what else "", getattr(check, "type", str))


def integer(lo: int, hi: int):
    def check(name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise SpecError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        return v

    return _checked(check, f"an integer in {lo}..{hi}", int)


def choice(*options: str):
    def check(name: str, v: Any) -> str:
        if v not in options:
            raise SpecError(f"{name} must be one of {', '.join(options)}, got {v!r}")
        return v

    return _checked(check, f"one of {', '.join(options)}", str)


def jittered_delay(ms: float, jitter_ms: float, rng: random.Random) -> float:
    """Seconds to wait: `ms` plus or minus up to `jitter_ms` (uniform), never below 0.
    The one meaning of jitter for every latency kind."""
    delay = ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0.0)
    return max(delay, 0.0) / 1000.0


class Kinds:
    """The fault kinds of one family, by name, and its stages (faultcore.registry). A kind
    joins by defining its class; a stage by `add_stage` (before the kinds that name it are
    defined)."""

    def __init__(self, noun: str, stages: Iterable[str | Stage] = ()):
        self.noun = noun  # "fault kind", "EC2 fault kind": how errors name a kind
        self.stages: Registry[Stage] = Registry(f"stage of the {noun}s")
        self.by_name: Registry[type[Fault]] = Registry(noun)
        for stage in stages:
            self.add_stage(stage if isinstance(stage, Stage) else Stage(stage))

    # -- stages ---------------------------------------------------------------------------

    def add_stage(self, stage: Stage) -> Stage:
        """Register a stage; it. A name registered by two stage classes is refused."""
        return self.stages.add(stage.name, stage, type(stage))

    def remove_stage(self, name: str) -> None:
        """Forget a stage (a test's throwaway stage)."""
        self.stages.remove(name)

    def at(self, hook: str) -> list[Stage]:
        """The stages a server runs at `hook`, in order."""
        return sorted((s for s in self.stages.values() if s.hook == hook),
                      key=lambda s: (s.order, s.name))

    # -- kinds ----------------------------------------------------------------------------

    def add(self, cls: type[Fault]) -> None:
        if cls.stage not in self.stages:
            raise TypeError(f"{cls.__qualname__}: stage must be one of {tuple(self.stages)}, "
                            f"got {cls.stage!r}")
        if isinstance(cls.order, bool) or not isinstance(cls.order, (int, float)):
            raise TypeError(f"{cls.__qualname__}: order must be a number")
        self.by_name.add(cls.kind, cls, cls)

    def remove(self, kind: str) -> None:
        """Forget a kind (a test's throwaway kind)."""
        self.by_name.remove(kind)

    def get(self, kind: Any) -> type[Fault]:
        return self.by_name.lookup(kind)

    def respell(self, spec: Any) -> str | None:
        """A fault spec's kind in an old spelling (`describe_lag`) replaced by the kind's name,
        in place; the one-line deprecation note a control API answers with, else None."""
        note = self.by_name.renamed(spec.get("kind")) if isinstance(spec, dict) else None
        if note is not None:
            spec["kind"] = self.by_name.canonical(spec["kind"])
        return note

    def __contains__(self, kind: str) -> bool:
        return kind in self.by_name

    def __iter__(self):
        return iter(sorted(self.by_name))

    def order_key(self, fault: Fault) -> tuple:
        """Where a live fault runs within its stage: by its kind's order, then creation."""
        return (fault.order, fault.kind, fault.created)

    def discover(self, package: str) -> None:
        """Import every module of `package`: each kind's file registers itself."""
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{package}.{info.name}")

    def describe(self) -> dict[str, dict[str, Any]]:
        """Each kind's description, stage, order and attributes (GET /kinds, help)."""
        return {name: cls.describe_kind() for name, cls in sorted(self.by_name.items())}

    def drawable(self) -> list[type[Fault]]:
        """The kinds random chaos may draw, in the order it draws from (see Chaos)."""
        return self.by_name.drawable()

    def params(self) -> dict[str, list[tuple[str, Param]]]:
        """Every kind-specific attribute name -> the (kind, Param) pairs declaring it, kinds
        by stage (as registered) and order: what a command line offers options for."""
        stage_rank = {name: i for i, name in enumerate(self.stages)}
        out: dict[str, list[tuple[str, Param]]] = {}
        for cls in sorted(self.by_name.values(),
                          key=lambda c: (stage_rank.get(c.stage, 0), c.order, c.kind)):
            for name, param in cls.params.items():
                out.setdefault(name, []).append((cls.kind, param))
        return out


class Fault:
    """One live fault. Family bases set `family` and the target hooks; kinds set the rest."""

    family: ClassVar[Kinds]
    kind: ClassVar[str] = ""  # empty on a base class: a base is not a kind
    stage: ClassVar[str] = ""
    order: ClassVar[float] = 0
    params: ClassVar[dict[str, Param]] = {}
    uses_probability: ClassVar[bool] = True
    description: ClassVar[str] = ""
    target_fields: ClassVar[tuple[str, ...]] = ()  # the spec's fields the family reads
    chaos: ClassVar[Chaos | None] = None  # whether and how random chaos draws it

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("kind"):
            cls.family.add(cls)

    def __init__(self, fid: str, target: Any, duration: float | None, probability: float,
                 attrs: dict[str, Any], created: float, created_wall: float):
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

    # -- building one from its JSON spec ------------------------------------------------------

    @classmethod
    def from_spec(cls, spec: Any, fid: str, created: float, created_wall: float,
                  **context: Any) -> Fault:
        """A validated fault of the family from its JSON spec, or SpecError (one line).
        `context` goes to the family's `parse_target` (what it checks targets against)."""
        if not isinstance(spec, dict):
            raise SpecError("a fault spec must be a JSON object")
        kind_cls = cls.family.get(spec.get("kind"))
        kind = kind_cls.kind
        known = (*kind_cls.target_fields, "duration", "probability", *kind_cls.params)
        for k in spec:
            if k != "kind" and k not in known:
                raise SpecError(f"unknown field {k!r} for {kind} (known: {', '.join(known)})")
        duration = spec.get("duration")
        if duration is not None:
            duration = number(0, None, lo_open=True)("duration", duration)
        probability = 1.0
        if "probability" in spec:
            probability = number(0, 1)("probability", spec["probability"])
            if not kind_cls.uses_probability and probability != 1.0:
                # What is served is one view at a time: no coin flips.
                raise SpecError(f"probability does not apply to {kind} (only 1 is accepted)")
        attrs = attributes(kind_cls.params, spec, kind)
        target = kind_cls.parse_target(spec, **context)
        fault = kind_cls(fid, target, duration, probability, attrs, created, created_wall)
        fault.check()
        return fault

    @classmethod
    def parse_target(cls, spec: dict[str, Any], **context: Any) -> Any:
        """The family's target from the spec's `target_fields` (SpecError when bad)."""
        return None

    def check(self) -> None:
        """Checks across attributes, once they are all parsed (raise SpecError)."""

    @classmethod
    def describe_kind(cls) -> dict[str, Any]:
        return {
            "description": cls.description,
            "stage": cls.stage,
            "order": cls.order,
            "attributes": sorted(cls.params) + (["probability"] if cls.uses_probability else []),
            "params": {name: p.describe() for name, p in cls.params.items()},
            "chaos": cls.chaos is not None,
        }

    # -- at run time ------------------------------------------------------------------------

    def expired(self, now: float) -> bool:
        return self.expires is not None and self.expires <= now

    def target_matches(self, req: Any) -> bool:
        """Whether the family's target covers this request (family hook)."""
        return True

    def applies(self, req: Any) -> bool:
        """The kind's own condition on a request, before the probability roll (kind hook)."""
        return True

    def fires(self, req: Any, rng: random.Random) -> bool:
        """Whether this fault acts on `req`: target, the kind's condition, then probability.
        The one place a probability is rolled, for every kind of both families (no roll
        at 1, so a certain fault draws nothing from the seeded generator)."""
        if not self.target_matches(req) or not self.applies(req):
            return False
        return self.probability >= 1.0 or rng.random() < self.probability

    # -- as JSON ------------------------------------------------------------------------------

    def target_json(self) -> dict[str, Any]:
        return {}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, **self.target_json(),
                               "duration": self.duration, "created": self.created_wall,
                               "expires": (self.created_wall + self.duration)
                               if self.duration is not None else None}
        if self.uses_probability:
            out["probability"] = self.probability
        out.update(self.attrs)
        return out
