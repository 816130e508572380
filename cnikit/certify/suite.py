"""Which runs a certification makes, running them, and the verdict over all of them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CHAOS = "random-chaos"
# random-chaos seeds a certification runs unless told: each draws another schedule of
# compound faults (docs/scenarios.md, "random-chaos"); three add about 45 s to the suite with
# --jobs 2 on two cores. The compound scenarios, not the search, are what reliably catch their
# bug kinds (measured: docs/scenarios.md, "Figures").
DEFAULT_SEEDS = 3


# A certificate vouches for what its runs exercised: CERTIFIED needs at least this share of
# them to have run the build through their faults (held or violated; inconclusive ones did
# not) and at least one whose faults reached it (docs/certify.md, "The overall verdict").
EXERCISED_BAR = 0.9
EXIT_CODES = {"certified": 0, "failed": 1, "incomplete": 2, "insufficient": 3}


@dataclass(frozen=True)
class Planned:
    scenario: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.scenario}-seed{self.seed}"


def plan(scenario_names: list[str], seeds: int) -> list[Planned]:
    """Every scenario once (seed 1); random-chaos, the one that searches, once per seed."""
    runs = []
    for name in scenario_names:
        for seed in range(1, (seeds if name == CHAOS else 1) + 1):
            runs.append(Planned(name, seed))
    return runs


@dataclass
class Certification:
    target: object
    runs: list[dict] = field(default_factory=list)  # one record per run, in plan order
    started: float = 0.0
    ended: float = 0.0
    runtime: str = "process"
    jobs: int = 1
    shard: tuple[int, int] | None = None
    document: dict = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.runs if r["verdict"] == verdict)

    @property
    def exposed(self) -> int:
        """Runs that held or failed with at least one of their faults reaching the build."""
        from cnikit.check.exposure import label

        return sum(1 for r in self.runs if r["verdict"] == "violation"
                   or label(r["verdict"], r.get("exposure")) == "exposed")

    @property
    def exercised(self) -> int:
        return sum(1 for r in self.runs if r["verdict"] in ("holds", "violation"))

    @property
    def too_slow(self) -> list[dict]:
        """Runs the machine was too slow to judge at their time scale: the quiet machine
        may have failed the build there, so none of them may pass it."""
        return [r for r in self.runs if r.get("too_slow") and r["verdict"] != "violation"]

    @property
    def verdict(self) -> str:
        """failed (a violation) | incomplete (a run the kit could not finish) | insufficient
        (too few runs exercised the build: under EXERCISED_BAR of them, none exposed to its
        faults, or one the machine was too slow for) | certified."""
        if self.count("violation"):
            return "failed"
        if self.count("error"):
            return "incomplete"
        if (not self.runs or self.exercised < EXERCISED_BAR * len(self.runs)
                or not self.exposed or self.too_slow):
            return "insufficient"
        return "certified"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def record(result, planned: Planned, report_root: Path) -> dict:
    """What the certificate keeps of one RunResult."""
    from cnikit.scenarios.parallel import run_record

    return run_record(result, planned.scenario, planned.seed, report_root)


@contextlib.contextmanager
def strict_leaks():
    """Leaks are violations while certifying (warnings in exploratory runs): the engine and
    the worker processes of --jobs read it from the environment."""
    from cnikit.scenarios.engine import STRICT_LEAKS_ENV

    before = os.environ.get(STRICT_LEAKS_ENV)
    os.environ[STRICT_LEAKS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STRICT_LEAKS_ENV, None)
        else:
            os.environ[STRICT_LEAKS_ENV] = before


def certify(target, seeds: int = DEFAULT_SEEDS, report_dir: str | Path = "reports/certify",
            only: list[str] | None = None,
            progress: Callable[[str], None] | None = None,
            on_result: Callable[[dict, int, int], None] | None = None,
            ec2: str = "moto", ec2_endpoint: str | None = None, jobs: int = 1,
            shard: tuple[int, int] | None = None,
            on_start: Callable[[Planned], None] | None = None) -> Certification:
    """Run the suite against `target` (a Target, a built-in name or a TOML path), then write
    certificate.json, report.html (the index) and junit.xml into report_dir.

    jobs: runs at once, each in its own process (cnikit.scenarios.parallel); shard (I, N):
    only the I-th of N deterministic shares of the plan (`cnikit report merge` joins them)."""
    from cnikit import scenarios
    from cnikit.certify import certificate, index, junit
    from cnikit.errors import UsageError
    from cnikit.scenarios.parallel import run_dir, take_shard
    from cnikit.targets import resolve_target

    if seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {seeds}")
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    t = resolve_target(target) if isinstance(target, (str, Path)) else target
    names = list(only) if only else scenarios.names()
    for n in names:
        scenarios.get(n)  # an unknown name fails here, before anything starts
    # A build is certified for its address family: the scenarios of another do not apply.
    skipped = [n for n in names if not t.runs(scenarios.get(n))]
    if only and skipped:
        raise UsageError(f"{', '.join(skipped)}: not of {t.name}'s address family "
                         f"({' and '.join(t.families)}; ip_family in its target file)")
    names = [n for n in names if n not in skipped]
    root = Path(report_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write the certification into {root}: {e.strerror}") from None
    # The node runtime travels as CNIKIT_RUNTIME (cnikit.containers.options).
    runtime = os.environ.get("CNIKIT_RUNTIME") or "process"
    cert = Certification(t, runtime=runtime, started=time.time(), jobs=jobs, shard=shard)
    todo = take_shard(plan(names, seeds), shard)
    done = [0]

    def finished(rec: dict) -> None:
        done[0] += 1
        if on_result is not None:
            on_result(rec, done[0], len(todo))

    with strict_leaks():
        if jobs == 1:
            for p in todo:
                if on_start is not None:
                    on_start(p)
                r = scenarios.run_scenario(scenarios.get(p.scenario), target=t, seed=p.seed,
                                           report_dir=run_dir(root, p.scenario, p.seed),
                                           progress=progress, ec2=ec2, ec2_endpoint=ec2_endpoint,
                                           strict_leaks=True)
                cert.runs.append(record(r, p, root))
                finished(cert.runs[-1])
        else:
            from cnikit.scenarios.parallel import run_all

            cert.runs = run_all(todo, t, root, jobs, ec2, ec2_endpoint, on_start=on_start,
                                on_done=finished)
    cert.ended = time.time()
    cert.document = certificate.build(cert)
    cert.paths = {"certificate": certificate.write(root, cert.document),
                  "html": index.write(root, cert.document)}
    cert.paths["junit"] = junit.write(root / "junit.xml", cert.document)
    return cert
