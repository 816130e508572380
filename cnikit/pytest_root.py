"""A pytest session that cannot run its root tests fails instead of skipping them all.

Without root every test on a cluster would be skipped and the session would exit 0: a CI
job misconfigured to run as a user would go green having tested nothing. So tests that need
root (marked `root`, and every test using the `cluster` or `invariants` fixture, which this
marks) stop a session without root, with one line, before any test runs. Leaving them out
is said explicitly: `-m "not root"` deselects them, and the session runs the rest.
"""

from __future__ import annotations

import os

import pytest

MARK = "root"
MARK_HELP = ("root: needs root (network namespaces); without root the session stops unless "
             "these are deselected with -m 'not root'")
# The plugin's fixtures that build namespaces (cnikit/pytest_plugin.py).
ROOT_FIXTURES = {"cluster", "invariants"}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", MARK_HELP)


def pytest_itemcollected(item) -> None:
    # Marked as they are collected, so `-m "not root"` deselects them like marked tests.
    if ROOT_FIXTURES & set(getattr(item, "fixturenames", ())):
        item.add_marker(MARK)


def needing_root(items) -> list:
    return [item for item in items if item.get_closest_marker(MARK) is not None]


def refusal(session) -> str | None:
    """The one line that stops this session, or None when it may run."""
    if os.geteuid() == 0:
        return None
    need = needing_root(session.items)
    if not need:
        return None
    return (f"cnikit: {len(need)} of the {len(session.items)} collected tests need root "
            f"(network namespaces; the first: {need[0].nodeid}) and this session runs as "
            f"uid {os.geteuid()}: run it as root, or leave them out with -m 'not root'")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    if session.config.option.collectonly:
        return
    reason = refusal(session)
    if reason is None:
        return
    if not hasattr(session.config, "workerinput"):
        raise pytest.UsageError(reason)
    # A pytest-xdist worker cannot stop the session from its collection (the controller
    # takes that for a crash); it runs nothing and hands the reason back, which the
    # controller reports as the reason it stopped.
    session.shouldfail = reason


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    if hasattr(session.config, "workerinput") and session.shouldfail:
        return True
    return None
