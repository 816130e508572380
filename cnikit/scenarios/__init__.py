"""Named, seeded scenarios: clients (pod add/delete) and a nemesis (IMDS and EC2 faults,
daemon kills and restarts) driven against a live CniCluster while the checkers watch.

    from cnikit.scenarios import names, get, run
    result = run("imds-stale-equal-length", "vpc-cni-1.18.3", seed=1)
    result.verdict          # "holds" | "violation" | "inconclusive" | "error"

A scenario is one module with one function decorated by `@scenario(...)`; it never judges
itself: the verdict comes from the checkers over the history (cnikit.check).
"""

from __future__ import annotations

import importlib

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

# One module per scenario, in the order `cnikit scenarios` lists them.
MODULES = (
    "imds_stale_equal_length",
    "imds_missing_eni",
    "restart_stale_imds",
    "prefix_partial_read",
    "ip_reuse_cooldown",
    "ec2_throttle_storm",
    "imds_outage",
    "daemon_crash_churn",
    "random_chaos",
)

_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        for m in MODULES:
            importlib.import_module(f"cnikit.scenarios.{m}")
        _loaded = True


def names() -> list[str]:
    _load()
    order = {f"cnikit.scenarios.{m}": i for i, m in enumerate(MODULES)}
    return sorted(_REGISTRY, key=lambda n: order.get(_REGISTRY[n].fn.__module__, len(order)))


def get(name: str) -> Scenario:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown scenario {name!r}; 'cnikit scenarios' lists them") from None


def run(name: str, target=None, seed: int = 1, **kw) -> RunResult:
    """Run a scenario against a target (a built-in name, a target file or a Target)."""
    return run_scenario(get(name), target=target, seed=seed, **kw)
