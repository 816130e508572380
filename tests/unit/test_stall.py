"""The stall meter (cnikit.check.stall): a real stall of the process is measured, and a run's
violations are set aside as too slow only when such a stall came just before them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from cnikit.check.stall import StallMeter

CHILD = """
import json, sys
from cnikit.check.stall import StallMeter
m = StallMeter(0.05).start()
print("ready", flush=True)
sys.stdin.readline()
m.stop()
print(json.dumps({"stalls": m.stalls, "worst": m.worst, "bound": m.bound}), flush=True)
"""


def test_a_process_held_off_the_cpu_is_measured():
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGSTOP)
        time.sleep(1.0)  # the stall itself, not a wait for something
        p.send_signal(signal.SIGCONT)
        p.stdin.write("stop\n")
        p.stdin.flush()
        got = json.loads(p.stdout.readline())
    finally:
        p.kill()
        p.wait(10)
    assert got["bound"] == 0.5
    assert got["worst"] >= 0.9 and any(s >= 0.9 for _, s in got["stalls"]), got


def _meter(stalls: list[tuple[float, float]]) -> StallMeter:
    m = StallMeter(0.05)  # bound 0.5 s, window 3 s
    m.stalls = stalls
    return m


def _v(since: float, kind: str = "unreachable") -> dict:
    return {"since": since, "kind": kind}


def test_timed_violations_just_after_a_stall_are_too_slow_to_judge():
    why = _meter([(100.0, 1.2)]).too_slow([_v(101.5), _v(140.0, "early-reuse")], started=90.0)
    assert why and "too slow" in why and "1.20s at +10.00s" in why
    assert _meter([(100.0, 1.2)]).too_slow([_v(100.5, "liveness")], started=90.0)


def test_a_violation_before_the_stall_long_after_it_or_of_state_stands():
    assert _meter([(100.0, 1.2)]).too_slow([_v(98.0)], started=90.0) is None
    assert _meter([(100.0, 1.2)]).too_slow([_v(110.0)], started=90.0) is None
    assert _meter([]).too_slow([_v(101.0)], started=90.0) is None
    assert _meter([(100.0, 1.2)]).too_slow([], started=90.0) is None
    # Who holds an address does not depend on the kit keeping time.
    for kind in ("ip-not-owned", "shared-ip"):
        assert _meter([(100.0, 1.2)]).too_slow([_v(101.0), _v(101.0, kind)], 90.0) is None


def test_a_daemon_that_exited_by_itself_stands_however_slow_the_machine():
    """A liveness violation of a bound not met is timed; a daemon's exit is a process fact."""
    from cnikit.scenarios.engine import liveness_record

    exited = liveness_record("n0", "the daemon exited by itself", at=101.0, timed=False)
    assert _meter([(100.0, 1.2)]).too_slow([exited], started=90.0) is None
    late = liveness_record("n0", "a pod got no IP within 10s", at=101.0)
    assert _meter([(100.0, 1.2)]).too_slow([late], started=90.0)
