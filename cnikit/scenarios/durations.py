"""How long each scenario's run took last time on this machine, kept between invocations,
so that the longest runs start first even into a fresh report directory (a run's own
report, when the directory has one, says it better: cnikit.scenarios.parallel.past_seconds).

Certifying the hardened build (40 runs, one seed) took 116 s in the plan's order and 72 s
longest first on 2 cores: the 67 s restart-while-detaching started last kept one worker
busy long after the others were done.

The file is `$CNIKIT_CACHE_DIR/run-seconds.json` (default `$XDG_CACHE_HOME/cnikit`, else
`~/.cache/cnikit`): {scenario: {target: seconds}}. A missing or unreadable file is an empty
one; it is replaced whole, so concurrent writers never leave half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def path() -> Path:
    base = os.environ.get("CNIKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cnikit")
    return Path(base) / "run-seconds.json"


def load() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def guess(known: dict, scenario: str, target: str) -> float | None:
    """The scenario's last time against this target, else its longest against any."""
    times = known.get(scenario)
    if not isinstance(times, dict) or not times:
        return None
    t = times.get(target)
    if isinstance(t, int | float):
        return float(t)
    others = [v for v in times.values() if isinstance(v, int | float)]
    return max(others) if others else None


def save(seen: list[tuple[str, str, float]]) -> None:
    """Record (scenario, target, seconds) of runs just made; a cache that cannot be written
    is no error (the order is only an optimisation)."""
    if not seen:
        return
    known = load()
    for scenario, target, seconds in seen:
        if isinstance(seconds, int | float) and seconds > 0:
            known.setdefault(scenario, {})[target] = round(float(seconds), 1)
    p = path()
    with contextlib.suppress(OSError):
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".run-seconds-")
        with os.fdopen(fd, "w") as f:
            json.dump(known, f, indent=1, sort_keys=True)
        os.replace(tmp, p)
