"""The eni-leak checker over histories written by hand, and the monitor's loose-enis entries
from a real gate: an ENI detached from a run's node and left available at the end of the run
past the grace is a leak; one deleted (or attached again) in time is not."""

from __future__ import annotations

from cnikit.check.history import History
from cnikit.check.invariants import Invariants
from cnikit.check.monitor import Monitor
from tests.unit.test_gate_rules import new_eni
from tests.waiting import wait_for

T0 = 1000.0


def live(grace: float = 5.0) -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=grace)
    h.subscribe(inv.step)
    return h, inv


def loose(h: History, at: float, *enis: str) -> None:
    h.info("monitor", "loose-enis", {"enis": {e: {"was_on": "i-1", "mac": "0a:00:00:00:00:01",
                                                  "ips": ["10.0.1.9", "10.0.1.10"]}
                                              for e in enis}}, at=at)


def end(h: History, at: float) -> None:
    h.info("scenario", "end", {"error": None}, at=at)


def leaks(inv: Invariants) -> list:
    return [v for v in inv.violations() if v.kind == "eni-leak"]


def test_left_available_past_the_grace_at_the_end_is_a_leak():
    h, inv = live(grace=5.0)  # eni-leak's grace: 6 x 5 s
    loose(h, T0, "eni-a", "eni-b")
    loose(h, T0 + 20, "eni-a")  # eni-b deleted in time
    end(h, T0 + 40)
    found = leaks(inv)
    assert [v.subject for v in found] == ["eni-a"]
    v = found[0]
    assert v.since == T0 + 30 and v.detail["node"] == "i-1"
    from cnikit.check.checkers.eni_leak import EniLeak

    line = EniLeak.evidence_line({**v.to_json(), **EniLeak.describe(v.to_json(), {})}, T0)
    assert line.startswith("+30.00s eni-leak: eni-a (mac 0a:00:00:00:00:01, 2 addresses) "
                           "detached from i-1 and left available for 40.0s")
    assert "pod -" not in line and "ip -" not in line


def test_within_the_grace_or_gone_before_the_end_is_none():
    h, inv = live(grace=5.0)
    loose(h, T0, "eni-a")
    end(h, T0 + 29)
    assert leaks(inv) == []
    h, inv = live(grace=5.0)
    loose(h, T0, "eni-a")
    loose(h, T0 + 31)
    end(h, T0 + 60)
    assert leaks(inv) == []


def test_the_monitor_records_an_eni_detached_from_a_run_node(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud)
    ec2 = gate_cloud.client()
    inst = topo.instances[0]
    other = new_eni(ec2, topo)  # never on a run node: never loose
    eni = new_eni(ec2, topo)
    h = History()
    mon = Monitor(gate_cloud.gate, h, [inst.instance_id]).start()
    try:
        att = ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=inst.instance_id,
                                           DeviceIndex=1)["AttachmentId"]
        ec2.detach_network_interface(AttachmentId=att)

        def entries():
            return [e["value"]["enis"] for e in h.entries() if e["f"] == "loose-enis"]

        got = wait_for(entries, 10, "a loose-enis entry")
        assert list(got[-1]) == [eni] and got[-1][eni]["was_on"] == inst.instance_id
        assert other not in got[-1]
        ec2.delete_network_interface(NetworkInterfaceId=eni)
        wait_for(lambda: entries()[-1] == {}, 10, "the ENI deleted")
    finally:
        mon.stop()
