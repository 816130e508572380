"""Waiting on a condition with a deadline: the only way tests synchronise (never a bare sleep)."""

from __future__ import annotations

import time


def wait_for(cond, timeout: float = 10.0, what: str = "condition", interval: float = 0.01):
    """Poll cond() until it returns something truthy and return that; fail at the deadline."""
    end = time.monotonic() + timeout
    last = None
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
