"""A wait for a reconcile pass of a build that never reads IMDS: two reconcile intervals
from that wait's own start, however late in the run it comes (docs/certify.md, "Builds of
any design")."""

from __future__ import annotations

from cnikit.scenarios.engine.observe import Observe
from cnikit.scenarios.engine.outcomes import ScenarioFailed


class LateInARun(Observe):
    """Observe's reconcile waits on a build that has made no IMDS read, 500 s into a run;
    the waits themselves are recorded, not waited."""

    def __init__(self, reads_after: int | None = None):
        self._reconciling: set = set()
        self.timeouts: list[float] = []
        self.adapted: list[str] = []
        self.reads_after = reads_after  # the wait at which a read shows up, if any

    def run_seconds(self, upstream_seconds: float) -> float:
        return upstream_seconds * 0.05

    def elapsed(self) -> float:
        return 500.0

    def imds_mark(self) -> int:
        return 0

    def reconcile_reads(self, node, since, attempts=False):
        return lambda: 1 if self.reads_after is not None \
            and len(self.timeouts) > self.reads_after else 0

    def wait_until(self, pred, timeout, what, poll=0.05):
        self.timeouts.append(timeout)
        if not pred():
            raise ScenarioFailed(f"timed out after {timeout:.1f}s waiting for {what}")

    def adapt(self, what: str) -> None:
        self.adapted.append(what)


def test_each_wait_gives_the_build_two_reconcile_intervals_from_its_own_start():
    ctx = LateInARun()
    ctx.wait_reconciles(0)
    ctx.wait_reconciles(0)
    assert ctx.timeouts == [6.0, 6.0], "two intervals at scale 0.05, each wait its own"
    assert len(ctx.adapted) == 2 and "no reconcile read" in ctx.adapted[0]


def test_a_build_seen_reading_is_not_asked_again():
    ctx = LateInARun(reads_after=0)
    assert ctx._reads_imds(0, False) and ctx._reads_imds(0, False)
    assert ctx.timeouts == [6.0]
