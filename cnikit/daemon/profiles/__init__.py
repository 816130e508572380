"""The reference daemon's profiles: one module per profile in this package.

A profile module defines `PROFILE = Profile(...)`: its name, a one-line summary, its reconcile
strategy (cnikit.daemon.reconcile.ReconcileStrategy) and the verdict each scenario is expected
to reach on it. Adding a profile is adding a module here; the daemon's configuration, the CLI
choices, the pytest option, the matrix and the built-in targets all read this registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from cnikit.errors import UsageError
from faultcore.registry import Registry

DEFAULT = "hardened"
HOLDS, VIOLATION = "holds", "violation"


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    reconcile: object  # a cnikit.daemon.reconcile.ReconcileStrategy
    order: int = 100  # position in listings (then by name)
    # scenario -> "holds" | "violation" | None (not asserted); a scenario not listed: "holds",
    # the verdict every correct build must reach.
    expected: Mapping[str, str | None] = field(default_factory=dict)
    # The address families this profile is run in (the daemon's ENABLE_IPv4 / ENABLE_IPv6
    # modes); a scenario of another family is not run against it.
    families: tuple[str, ...] = ("ipv4", "ipv6")

    def expected_verdict(self, scenario: str) -> str | None:
        return self.expected.get(scenario, HOLDS)


def discover(package: str = __name__) -> Registry[Profile]:
    """name -> Profile for every module of `package` that defines PROFILE, in display order
    (faultcore.registry: a name two modules give is refused, naming both)."""
    pkg = importlib.import_module(package)
    found: list[tuple[Profile, str]] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        module = f"{package}.{info.name}"
        prof = getattr(importlib.import_module(module), "PROFILE", None)
        if isinstance(prof, Profile):
            found.append((prof, module))
    out: Registry[Profile] = Registry("daemon profile")
    for prof, module in sorted(found, key=lambda pm: (pm[0].order, pm[0].name)):
        out.add(prof.name, prof, module)
    return out


_registry: Registry[Profile] | None = None


def registry() -> Registry[Profile]:
    global _registry
    if _registry is None:
        _registry = discover()
    return _registry


def names(family: str | None = None) -> list[str]:
    """Every profile, or those run in `family` ("ipv4" or "ipv6")."""
    return [n for n, p in registry().items() if family is None or family in p.families]


def get(name: str) -> Profile:
    try:
        return registry()[name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r}; one of {', '.join(names())}") from None
