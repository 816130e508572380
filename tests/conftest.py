"""Order of the whole suite: longest first, so that `make test`'s workers (pytest-xdist)
end together instead of one finishing a long scenario test after the others are idle."""

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
