"""Options of the scenario suite: --scenario-seeds N (default 1; 5 for the acceptance run),
--chaos-duration S and --chaos-seeds N for the long random-chaos run (opt-in: -m chaos_long)."""

from __future__ import annotations

import pytest

# The matrix cells' extra checks fail with pytest's assertion detail, as a test's would.
pytest.register_assert_rewrite("tests.scenarios.cell_checks")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("cnikit scenarios")
    group.addoption("--scenario-seeds", type=int, default=1,
                    help="seeds per scenario x profile cell (default 1)")
    group.addoption("--chaos-duration", type=float, default=60.0,
                    help="seconds of random-chaos in the long chaos test (default 60)")
    group.addoption("--chaos-seeds", type=int, default=10,
                    help="seeds of the long chaos test (default 10)")


# Tests a default run leaves out, each run only when its marker is asked for with -m.
OPT_IN = {
    "chaos_long": "long random-chaos",
    "certify_new": "a fixture build not yet shown to certify (or fail) the same way in five "
                   "certifications running",
}


def pytest_configure(config) -> None:
    for marker, what in OPT_IN.items():
        config.addinivalue_line("markers", f"{marker}: {what} (opt-in: -m {marker})")


def pytest_generate_tests(metafunc) -> None:
    if "chaos_seed" in metafunc.fixturenames:
        n = metafunc.config.getoption("--chaos-seeds")
        metafunc.parametrize("chaos_seed", list(range(1, n + 1)),
                             ids=[f"seed{s}" for s in range(1, n + 1)])


def pytest_collection_modifyitems(config, items) -> None:
    asked = config.getoption("-m") or ""
    for marker, what in OPT_IN.items():
        if marker in asked:
            continue
        skip = pytest.mark.skip(reason=f"{what}: opt in with -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
