"""A test's failure always reaches the session as a report of bounded size, even when
pytest cannot format it: once, on a busy machine, formatting one failure raised
`SystemError: AST constructor recursion depth mismatch` inside an xdist worker, which
crashed the worker and ended the session 165 tests in, the failures named nowhere. Loaded by
tests/conftest.py; `-p tests.bounded_reports` for a session of its own."""

from __future__ import annotations

import pytest

LIMIT = 20_000  # characters of a failure's text a report keeps (its end: the error itself)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    try:
        report = yield
    except Exception as e:  # formatting the failure failed: report it plainly instead
        from _pytest.reports import TestReport

        exc = call.excinfo
        what = f"{exc.typename}: {_safe_str(exc.value)}" if exc else "(no exception)"
        text = (f"{what}\n(pytest could not format this failure: {type(e).__name__}: "
                f"{_safe_str(e)})")
        return TestReport(item.nodeid, item.location, {}, "failed" if exc else "passed",
                          text[-LIMIT:], call.when, duration=call.duration,
                          start=call.start, stop=call.stop)
    if report.failed and report.longrepr is not None:
        text = str(report.longrepr)
        if len(text) > LIMIT:
            report.longrepr = f"(the first {len(text) - LIMIT} characters cut)\n" + text[-LIMIT:]
    return report


def _safe_str(x) -> str:
    try:
        return str(x)[:4000]
    except Exception:
        return f"<{type(x).__name__}, str() failed>"
