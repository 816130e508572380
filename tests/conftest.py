"""Order of the whole suite: longest first, so that `make test`'s workers (pytest-xdist)
end together instead of one finishing a long scenario test after the others are idle; and
how the workers share it out."""

from __future__ import annotations

# A scenario test runs a cluster for 10-100 s, an integration test for a few seconds to a
# minute, a unit test mostly under a second. Within a folder the order is kept (modules stay
# together, so their module-scoped fixtures are made once per worker as before).
_FIRST = ("scenarios", "integration", "unit")


def pytest_collection_modifyitems(items) -> None:
    def rank(item) -> int:
        parts = item.path.parts
        return next((n for n, d in enumerate(_FIRST) if d in parts), len(_FIRST))

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config, log):
    """Hand the tests out in that order, each to the next worker with room (at most three
    queued), as one unit per module outside tests/scenarios: a module's fixtures (a cluster,
    a daemon) are made once, and some modules' tests are steps on one of them.

    xdist's default (`load`) first sends each worker a quarter of its share in one
    contiguous slice: the first two workers got the 64 longest scenario tests and ran 528 s
    while the last two were done after 180 s (a fresh clone's `make test`, 546 s)."""
    from xdist.scheduler import LoadScopeScheduling

    class ScenariosOneByOne(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module.startswith("tests/scenarios/") else module

    config.option.loadscopereorder = False  # keep the order above, not biggest module first
    return ScenariosOneByOne(config, log)
