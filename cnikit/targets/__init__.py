"""Targets: the CNI build under test (a daemon per node and a CNI plugin), described by a
TOML file or built in (the reference daemon's profiles).

    from cnikit.targets import resolve_target, builtin_names
    t = resolve_target("hardened")             # a built-in, or
    t = resolve_target("path/to/target.toml")  # a file; UsageError (one line) when bad
    t.expected("imds-stale-equal-length")      # "holds" | "violation" | None (not asserted)

cnikit.targets.node runs a target on a cluster's nodes (cnikit.cluster.CniCluster).
"""

from __future__ import annotations

import os
from pathlib import Path

from cnikit.errors import UsageError
from cnikit.targets.loader import load_target
from cnikit.targets.model import (
    PLACEHOLDERS,
    DaemonSpec,
    ObserveSpec,
    PluginSpec,
    ReadySpec,
    Target,
    render,
)

__all__ = ["PLACEHOLDERS", "DaemonSpec", "ObserveSpec", "PluginSpec", "ReadySpec", "Target",
           "builtin", "builtin_names", "default_name", "load_target", "render", "resolve_target"]


def builtin_names() -> list[str]:
    """The built-in targets (the reference daemon's profiles), in display order."""
    from cnikit.daemon import profiles

    return profiles.names()


def default_name() -> str:
    from cnikit.daemon import profiles

    return profiles.DEFAULT


def builtin(name: str) -> Target:
    from cnikit.daemon import profiles
    from cnikit.targets.reference import builtin_target

    return builtin_target(profiles.get(name))


def resolve_target(spec: str | os.PathLike | Target) -> Target:
    """A Target as is, a built-in by name, or a target file by path."""
    if isinstance(spec, Target):
        return spec
    text = os.fspath(spec)
    if not isinstance(spec, Path) and text in builtin_names():
        return builtin(text)
    if isinstance(spec, Path) or "/" in text or text.endswith(".toml") or Path(text).exists():
        return load_target(text)
    raise UsageError(f"unknown target {text!r}: not a built-in ({', '.join(builtin_names())}) "
                     "and not a target file")
