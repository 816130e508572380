"""A time scale that slows down instead of giving up.

A run compresses upstream's intervals by its time scale (at 0.05 a 30 s IP cooldown lasts
1.5 s). A machine busy with other work can fall behind that: the kit's process held off the
CPU before a violation, a reuse the prober never got to probe, a race the scenario staged
and lost (cnikit.check.stall, engine.outcomes.TooSlow). Such a run is not judged. Rather than
call it inconclusive at once, it is run again with every interval longer, by each factor of
`CNIKIT_SLOWER_SCALES` in turn (default 2 then 4: 0.05, then 0.1, then 0.2), until one is
judged; only a run too slow at every scale is inconclusive. A busy CI runner then still
sees a race the quiet machine sees: a slower scale gives the machine more time per
upstream second, and the build's logic is the same at any scale.

Every attempt is kept in the result (`RunResult.attempts`: its scale, verdict, why it was too
slow, its report, moved under `scale-<s>/` of the run's report directory), and the run record,
the certificate and the report say which scale the verdict came from.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from cnikit.errors import EnvironmentProblem

ENV = "CNIKIT_SLOWER_SCALES"
DEFAULT = (2.0, 4.0)
MAX_FACTOR = 16.0


def factors(slower: tuple[float, ...] | None = None) -> tuple[float, ...]:
    """The scale factors to try, the first being 1 (the run's own scale): `slower`, else
    CNIKIT_SLOWER_SCALES ("2,4"; "" or "none": no re-run), else 2 then 4."""
    if slower is None:
        raw = os.environ.get(ENV)
        if raw is None:
            slower = DEFAULT
        elif raw.strip().lower() in ("", "none", "0"):
            slower = ()
        else:
            try:
                slower = tuple(float(x) for x in raw.split(","))
            except ValueError:
                raise EnvironmentProblem(
                    f"{ENV}={raw!r}: give factors such as 2,4 (or none)") from None
    out = (1.0, *slower)
    if any(b <= a for a, b in zip(out, out[1:], strict=False)) or out[-1] > MAX_FACTOR:
        raise EnvironmentProblem(f"{ENV}: each factor must be larger than the one before it, "
                                 f"above 1 and at most {MAX_FACTOR:g}, not {slower!r}")
    return out


def too_slow(result) -> bool:
    """Whether the machine was too slow to judge this run (a violation always stands)."""
    return result.verdict == "inconclusive" and bool(result.too_slow)


def every_scale(tried: list[dict], last: float) -> str:
    """What a reason too slow at every scale ends with: " (at every time scale tried: 0.05,
    0.1 and 0.2)"."""
    scales = ", ".join(f"{a['scale']:g}" for a in tried)
    return f" (at every time scale tried: {scales} and {last:g})"


def run(attempt: Callable[[float], object], scale: float, factors: tuple[float, ...],
        report_dir: str | Path | None, write: Callable[[Path, object], dict],
        say: Callable[[str], None], label: str):
    """attempt(factor) -> RunResult at scale x factor; the first judged one, or the last."""
    tried: list[dict] = []
    for n, factor in enumerate(factors):
        result = attempt(factor)
        last = n == len(factors) - 1
        result.attempts = list(tried)
        if tried:
            result.params["base_scale"] = scale
        if not too_slow(result) or last:
            if last and too_slow(result) and tried:
                result.too_slow = result.precondition = (
                    result.too_slow + every_scale(tried, result.params["scale"]))
            if report_dir is not None:
                result.report = {k: str(v) for k, v in write(Path(report_dir), result).items()}
            return result
        where = None
        if report_dir is not None:
            where = Path(report_dir) / f"scale-{result.params['scale']:g}"
            shutil.rmtree(where, ignore_errors=True)
            write(where, result)
        tried.append({"scale": result.params["scale"], "factor": factor,
                      "verdict": result.verdict, "too_slow": result.too_slow,
                      "seconds": result.seconds,
                      "run_id": result.params.get("run_id"),
                      "report": str(where / "report.html") if where else None})
        say(f"{label}: too slow for time scale {result.params['scale']:g}; again at "
            f"{scale * factors[n + 1]:g} ({factors[n + 1]:g}x)")
    raise AssertionError("unreachable: the last factor returns")

