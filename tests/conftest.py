"""Order of the whole suite and how `make test`'s workers (pytest-xdist) share it out: the
tests that share one LocalStack, long modules, then the matrix cells one by one, then the
unit tests, each unit to the next worker with room, so that the workers end together; and
the LocalStack those tests share."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.bounded_reports"]

# A scenario test runs a cluster for 10-100 s, an integration test for a few seconds to a
# minute, a unit test mostly under a second. The matrix's cells are independent runs, a
# third of the suite's time: they go out one by one, after the modules of several long
# tests, and fill the gaps those leave; the quick unit tests fill the end. A unit module
# with a test marked `slow` goes out with the long modules: one at the end (test_daemon_faults,
# 30 s) kept its worker busy 17 s after the others were done. Within a module the order
# is kept.
_MATRIX = "tests/scenarios/test_matrix.py"
# Modules whose tests each make many runs (a whole certification): one test a unit, like a
# matrix cell, sent out with the long modules.
_ONE_BY_ONE = ("tests/scenarios/test_foreign_builds.py",)
# Tests whose id names LocalStack share one (the `localstack_url` fixture below): a start
# costs about 8 s of CPU and 630 MB. They are one unit, sent first to one worker, so that
# worker starts it once. A LocalStack test elsewhere is still right, only slower (its
# worker starts one of its own).
_LOCALSTACK = "localstack"


def _shares_localstack(nodeid: str) -> bool:
    return _LOCALSTACK in nodeid.lower()


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _rank(nodeid: str, slow_modules: set[str]) -> int:
    if _shares_localstack(nodeid):
        return -1
    if nodeid.startswith(_MATRIX):
        return 1
    module = _module(nodeid)
    if module.startswith(("tests/scenarios/", "tests/integration/")) or module in slow_modules:
        return 0
    return 2


def pytest_configure(config) -> None:
    # The suite's processes (its xdist workers above all) run the kit in-process: they get
    # the collector settings of the kit's own command lines (faultcore.gc_policy).
    from faultcore import gc_policy

    gc_policy.relax()


def pytest_collection_modifyitems(items) -> None:
    slow = {_module(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _rank(item.nodeid, slow))


def _unit(nodeid: str) -> str:
    """What goes to one worker at once: a matrix cell alone, any other test with its module
    (a module's fixtures, a cluster or a daemon, are made once; some modules' tests are
    steps on one of them)."""
    if _shares_localstack(nodeid):
        return _LOCALSTACK
    module = _module(nodeid)
    return nodeid if module == _MATRIX or module in _ONE_BY_ONE else module


@pytest.fixture(scope="session")
def localstack_url():
    """A LocalStack EC2 (its own venv, no Docker) shared by the tests of one process that
    need one running; skipped when `make localstack` has not been run. Tests that share it
    keep to CIDRs of their own: it is never reset (LocalStack's community edition cannot)."""
    from cnikit.cloud.localstack import LocalStackProcess, localstack_python

    if localstack_python() is None:
        pytest.skip("LocalStack is not installed: run `make localstack` (it installs into "
                    ".venv-localstack); make test does")
    with LocalStackProcess() as ls:
        yield ls.url


def pytest_xdist_make_scheduler(config, log):
    """xdist's `load` first sends each worker a contiguous quarter of its share: two workers
    got the 62 matrix cells and ran 570 s while the others were done after 300 s. This one
    sends a worker its next unit when it has fewer than two tests queued (xdist runs a test
    only once it knows the next one, or that there is none)."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    class UnitAtATime(LoadScheduling):
        def schedule(self) -> None:
            if self.collection is None:
                if not self._check_nodes_have_same_collection():
                    self.log("**Different tests collected, aborting run**")
                    return
                self.collection = next(iter(self.node2collection.values()))
                self.pending[:] = range(len(self.collection))
            for node in self.nodes:
                self.check_schedule(node)

        def check_schedule(self, node, duration: float = 0) -> None:
            if node.shutting_down:
                return
            # A crashed worker's tests come back at the end of `pending` (remove_node), in
            # their order, so a unit is still the run of pending tests with one key.
            while self.pending and len(self.node2pending[node]) < 2:
                key = _unit(self.collection[self.pending[0]])
                n = 1
                while n < len(self.pending) and _unit(self.collection[self.pending[n]]) == key:
                    n += 1
                self._send_tests(node, n)
            if not self.pending:
                node.shutdown()

    return UnitAtATime(config, log)
