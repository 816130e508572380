"""The CPU gate's admission rules (cnikit.scenarios.cpu_gate) on a made-up machine: runs
start while the CPU has room, one per start gap, never over the limit, always at least one;
and run_specs with a gate never has more runs at once than it admits."""

from __future__ import annotations

import threading

from cnikit.scenarios.cpu_gate import CpuGate, cpu_times


class Machine:
    """A clock and /proc/stat figures the test moves by hand."""

    def __init__(self):
        self.now, self.idle, self.total = 0.0, 0.0, 0.0

    def run(self, seconds: float, idle_share: float) -> None:
        self.now += seconds
        self.total += seconds * 200  # 2 cores, 100 jiffies a second each
        self.idle += seconds * 200 * idle_share

    def gate(self, limit: int) -> CpuGate:
        return CpuGate(limit, idle_min=0.3, gap=0.75, window=1.0, floor=1,
                       times=lambda: (self.idle, self.total), clock=lambda: self.now)


def test_the_first_run_always_starts_even_on_a_busy_machine():
    m = Machine()
    g = m.gate(4)
    assert g.admit(0)


def test_another_run_waits_for_a_measured_idle_share_and_the_start_gap():
    m = Machine()
    g = m.gate(4)
    assert g.admit(0)
    assert not g.admit(1), "no measurement of the machine yet"
    m.run(0.5, 0.9)
    assert not g.admit(1), "within the start gap"
    m.run(0.5, 0.9)
    assert g.admit(1)
    m.run(0.8, 0.1)
    m.run(0.8, 0.1)
    assert not g.admit(2), "the machine is busy: fewer runs"
    m.run(1.0, 0.6)
    assert g.admit(2) and g.peak == 3


def test_never_more_than_the_limit():
    m = Machine()
    g = m.gate(2)
    assert g.admit(0)
    m.run(2.0, 1.0)
    assert g.admit(1)
    m.run(2.0, 1.0)
    assert not g.admit(2)


def test_one_run_per_core_starts_whatever_the_load_one_start_gap_apart():
    m = Machine()
    g = CpuGate(3, idle_min=0.3, gap=0.75, window=1.0, floor=2,
                times=lambda: (m.idle, m.total), clock=lambda: m.now)
    assert g.admit(0)
    m.run(0.5, 0.0)
    assert not g.admit(1), "within the start gap"
    m.run(0.5, 0.0)
    assert g.admit(1), "the floor: a second run on a busy machine"
    m.run(2.0, 0.0)
    assert not g.admit(2), "above the floor the machine must have room"
    assert CpuGate(1, floor=4).floor == 1, "never over the limit"


def test_cpu_times_reads_this_machine():
    idle, total = cpu_times()
    assert 0 < idle < total


def test_run_specs_keeps_to_what_the_gate_admits(monkeypatch):
    from cnikit.scenarios import parallel

    at_once, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    class FakePool:
        def __init__(self, jobs):
            pass

        def run(self, spec):
            with lock:
                at_once[0] += 1
                peak[0] = max(peak[0], at_once[0])
            release.wait(0.05)
            with lock:
                at_once[0] -= 1
            return {"n": spec["n"]}

        def close(self):
            pass

        def stop(self):
            pass

    class TwoAtOnce:
        def admit(self, running):
            return running < 2

    monkeypatch.setattr(parallel, "Pool", FakePool)
    recs = parallel.run_specs(list(range(7)), lambda i: {"n": i}, 5, gate=TwoAtOnce(),
                              seconds_of=lambda i: float(i))
    assert [r["n"] for r in recs] == list(range(7)), "records in the items' order"
    assert peak[0] == 2
