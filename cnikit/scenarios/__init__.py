"""Named, seeded scenarios: clients (pod add/delete) and a nemesis (IMDS and EC2 faults,
daemon kills and restarts) driven against a live CniCluster while the checkers watch.

    from cnikit.scenarios import names, get, run
    result = run("imds-stale-equal-length", "vpc-cni-1.18.3", seed=1)
    result.verdict          # "holds" | "violation" | "inconclusive" | "error"

A scenario is one module of this package with one function decorated by `@scenario(...)`
(found by importing the package's modules: there is no list to add it to); it never judges
itself: the verdict comes from the checkers over the history (cnikit.check).
"""

from __future__ import annotations

import importlib
import pkgutil

from cnikit.errors import UsageError
from cnikit.scenarios.engine import REGISTRY as _REGISTRY
from cnikit.scenarios.engine import (  # noqa: F401 - the package's public API
    Ctx,
    RunResult,
    Scenario,
    ScenarioFailed,
    run_scenario,
    scenario,
)
from faultcore.suggest import did_you_mean

_loaded = False


def _load() -> None:
    """Import every module of this package: a scenario registers itself by being defined
    (`@scenario`), so a new scenario is one new module and nothing else to list."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


def names() -> list[str]:
    """Every scenario, in the order `cnikit scenarios` lists them (by name)."""
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> Scenario:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown scenario {name!r} ('cnikit scenarios' lists them)"
                         f"{did_you_mean(name, _REGISTRY)}") from None


def run(name: str, target=None, seed: int = 1, **kw) -> RunResult:
    """Run a scenario against a target (a built-in name, a target file or a Target)."""
    return run_scenario(get(name), target=target, seed=seed, **kw)
