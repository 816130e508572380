"""The nemesis (cnikit.cluster.nemesis): every fault the kit injects is one operation in one
history shape, and the report draws each one. Real parts: moto behind the gate and the
fault IMDS following it; the daemons are a stand-in that counts calls (a real daemon needs
root and namespaces: tests/integration/test_daemon_cluster.py kills and restarts those)."""

from __future__ import annotations

import pytest

from cnikit.check.history import History
from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
from cnikit.cluster.nemesis import Nemesis, TargetGone
from cnikit.errors import UsageError
from fault_imds.client import FaultClient, FaultError
from fault_imds.server import ImdsServer
from tests.unit.imds_support import MACS, Imds
from tests.waiting import wait_for

SHAPE = {"op", "id", "target"}


class Daemons:
    """Counts kills and restarts; a restart raises while `broken`."""

    def __init__(self, instance_ids):
        self.ids, self.calls, self.broken = instance_ids, [], False

    def instance_id(self, node):
        return self.ids[node]

    def signal_daemon(self, node, sig):
        self.calls.append(("kill", node, sig))

    def stop_and_start_daemon(self, node, wait):
        if self.broken:
            raise OSError("the daemon did not start")
        self.calls.append(("restart", node))


@pytest.fixture(scope="module")
def parts(gate_cloud):
    imds = ImdsServer(ec2_endpoint=gate_cloud.endpoint).start()
    yield gate_cloud, imds
    imds.stop()


@pytest.fixture
def nemesis(parts, gate_new_vpc):
    cloud, imds = parts
    topo = gate_new_vpc(cloud, nodes=2)
    for inst in topo.instances:  # the IMDS follows EC2 a moment later
        wait_for(lambda i=inst: i.mac in (Imds(imds.url, i.instance_id).text(MACS) or ""),
                 10, f"the IMDS to serve {inst.instance_id}")
    h = History()
    daemons = Daemons([i.instance_id for i in topo.instances])
    n = Nemesis(h, imds_control=imds.control_url, cloud=cloud, daemons=daemons)
    yield n, h, topo, daemons
    n.heal()


def ops(h: History) -> list[tuple[str, str]]:
    return [(e["type"], e["f"]) for e in h.entries() if e["process"] == "nemesis"]


def test_every_kind_of_fault_is_one_operation_in_one_shape(nemesis):
    n, h, topo, daemons = nemesis
    inst = topo.instances[0]
    with n.imds.stale(mac=inst.mac):  # a shortcut of the fault client, removed on exit
        pass
    g = n.ec2_fault("throttle", target={"action": "AssignPrivateIpAddresses"}, probability=0.5)
    assert any(f["id"] == g for f in n.ec2.list())
    n.end(g)
    n.kill_daemon(1)
    n.restart_daemon(1)
    n.restart_daemon(0)  # a running daemon: down from stop to ready
    n.take_ips(inst.primary_eni_id, [f"{topo.subnet_cidr.rsplit('.', 1)[0]}.200"])
    n.unassign(f"{topo.subnet_cidr.rsplit('.', 1)[0]}.200")
    assert ops(h) == [
        ("start", "imds-fault"), ("end", "imds-fault"),
        ("start", "ec2-fault"), ("end", "ec2-fault"),
        ("start", "daemon-kill"), ("end", "daemon-kill"),
        ("start", "daemon-restart"), ("end", "daemon-restart"),
        ("info", "ec2-assign-elsewhere"), ("info", "ec2-unassign")]
    entries = [e for e in h.entries() if e["process"] == "nemesis"]
    assert all(SHAPE <= set(e["value"]) and e["value"]["op"] == e["f"] for e in entries)
    # A start and its end share one id; what it hit is its target.
    assert entries[0]["value"]["id"] == entries[1]["value"]["id"]
    assert entries[0]["value"]["target"] == {"mac": inst.mac}
    assert entries[0]["value"]["kind"] == "stale"
    assert entries[2]["value"]["target"] == {"action": "AssignPrivateIpAddresses"}
    assert (entries[2]["value"]["kind"], entries[2]["value"]["probability"]) == ("throttle", 0.5)
    # Both kinds of fault end alike: how, in `by`.
    assert entries[1]["value"]["by"] == entries[3]["value"]["by"] == "removed"
    assert entries[4]["value"]["target"] == {"node": 1, "instance_id": topo.instances[1].instance_id}
    assert entries[5]["value"]["id"] == entries[4]["value"]["id"]
    assert entries[9]["value"]["target"]["eni"] == inst.primary_eni_id
    assert daemons.calls == [("kill", 1, 9), ("restart", 1), ("restart", 0)]
    assert n.in_effect() == []


def test_a_failed_act_is_recorded_and_nothing_stays_in_effect(nemesis):
    n, h, _, daemons = nemesis
    with pytest.raises(FaultError, match="no-such-kind"):
        n.imds_fault("no-such-kind")
    with pytest.raises(UsageError, match="no-such-kind"):
        n.ec2_fault("no-such-kind")
    n.kill_daemon(0)
    daemons.broken = True
    with pytest.raises(OSError):
        n.restart_daemon(0)
    daemons.broken = False
    n.restart_daemon(0)  # the kill ends only now
    assert ops(h) == [("fail", "imds-fault"), ("fail", "ec2-fault"), ("start", "daemon-kill"),
                      ("fail", "daemon-restart"), ("end", "daemon-kill")]
    assert "error" in h.entries()[0]["value"] and n.in_effect() == []


def test_a_fault_at_an_interface_deleted_meanwhile_is_skipped_and_recorded(nemesis):
    """The build freed the interface between a fault being aimed and applied: nothing is
    injected, nothing fails, and the history says what was skipped and why."""
    n, h, topo, _ = nemesis
    ec2 = n.cloud.client()
    eni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
    eni_id, mac = eni["NetworkInterfaceId"], eni["MacAddress"]
    n.end(n.imds_fault("stale", target={"mac": mac}))  # aimed while EC2 has it
    ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    with pytest.raises(TargetGone, match=f"imds stale fault skipped: {eni_id}"):
        n.imds_fault("stale", target={"mac": mac}, duration=5)
    assert ops(h) == [("start", "imds-fault"), ("end", "imds-fault"), ("info", "fault-skipped")]
    skipped = h.entries()[-1]["value"]
    assert skipped["target"] == {"mac": mac}
    assert skipped["fault"] == "imds-fault" and skipped["kind"] == "stale"
    assert f"{eni_id} (mac {mac}) left EC2" in skipped["reason"]
    assert "DeleteNetworkInterface" in skipped["reason"]
    assert n.in_effect() == [] and n.imds.list() == []
    # An interface EC2 never had is a bad spec: a failed act, not a skip.
    with pytest.raises(FaultError, match="unknown target mac") as exc:
        n.imds_fault("stale", target={"mac": "02:00:00:00:00:01"})
    assert not isinstance(exc.value, TargetGone)
    assert ops(h)[-1] == ("fail", "imds-fault")


def test_heal_ends_every_fault_and_a_later_history_sees_those_in_effect(nemesis):
    n, h, topo, _ = nemesis
    n.imds_fault("error", target={"path": "*/ami-id"}, status=503)
    n.ec2_fault("latency", ms=5)
    late = History()
    n.attach(late)
    assert [(e["type"], e["f"]) for e in late.entries()] == [("start", "imds-fault"),
                                                             ("start", "ec2-fault")]
    n.heal()
    assert ops(h)[-3:] in ([("end", "imds-fault"), ("end", "ec2-fault"), ("info", "heal")],)
    assert n.in_effect() == [] and n.imds.list() == [] and n.ec2.list() == []


def test_the_report_draws_every_nemesis_operation(nemesis):
    from cnikit.report import build

    n, h, topo, _ = nemesis
    inst = topo.instances[0]
    g = n.ec2_fault("throttle", probability=0.5)
    n.kill_daemon(0)
    n.take_ips(inst.primary_eni_id, [f"{topo.subnet_cidr.rsplit('.', 1)[0]}.201"])
    n.restart_daemon(0)
    n.end(g)
    f = n.imds_fault("missing", target={"mac": inst.mac}, duration=30)
    n.end(f)
    result = {"scenario": "t", "profile": "hardened", "seed": 1, "verdict": "holds",
              "seconds": 1.0, "violations": [], "warnings": [], "history": h.entries(),
              "imds_events": [], "audit": []}
    _, tl = build(result)
    drawn = {(s.label.split()[0], s.instant) for s in tl.faults if s.source == "nemesis"}
    assert drawn == {("ec2-fault", False), ("daemon-kill", False),
                     ("ec2-assign-elsewhere", True), ("imds-fault", False)}
    spans = {s.label.split()[0]: s for s in tl.faults}
    kill = [e for e in h.entries() if e["f"] == "daemon-kill"]
    assert spans["daemon-kill"].end == kill[1]["time"]  # ends at the restart
    missing = [e for e in h.entries() if e["f"] == "imds-fault"]
    assert spans["imds-fault"].end == missing[1]["time"]  # removed before its 30 s
    assert "kind=missing" in spans["imds-fault"].label and inst.mac in spans["imds-fault"].label


def test_faults_added_over_the_control_apis_are_followed(nemesis, parts):
    """`cnikit up`'s case: someone else adds faults over HTTP; the follower records them."""
    import json
    import urllib.request

    from cnikit.cloud.gate import CONTROL

    n, h, _, _ = nemesis
    cloud, imds = parts
    follower = n.follow(interval=0.05)
    try:
        outside = FaultClient(imds.control_url)  # not the nemesis's client
        fid = outside.add("latency", target={"path": "*/ami-id"}, ms=1)
        gate = cloud.endpoint.rstrip("/") + CONTROL.rstrip("/") + "/faults"

        def post(url, spec):
            req = urllib.request.Request(url, data=json.dumps(spec).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())["id"]

        gid = post(gate, {"kind": "throttle", "target": {"action": "CreateNetworkInterface"}})
        wait_for(lambda: len(ops(h)) == 2, 10, "both faults followed")
        outside.remove(fid)
        cloud.gate.faults.remove(gid)
        wait_for(lambda: len(ops(h)) == 4, 10, "both ends followed")
        # Faults whose duration runs out end "expired" on both sides.
        short = {"kind": "latency", "ms": 1, "duration": 0.2}
        short_f = post(imds.control_url + "/faults", {**short, "target": {"path": "*/ami-id"}})
        short_g = post(gate, {**short, "target": {"action": "DescribeImages"}})
        wait_for(lambda: len(ops(h)) == 8, 10, "both short faults followed to their end")
    finally:
        follower.stop()
    entries = [e for e in h.entries() if e["process"] == "nemesis"]
    assert sorted((e["type"], e["f"], e["value"]["id"]) for e in entries) == sorted([
        ("start", "imds-fault", fid), ("end", "imds-fault", fid),
        ("start", "ec2-fault", gid), ("end", "ec2-fault", gid),
        ("start", "imds-fault", short_f), ("end", "imds-fault", short_f),
        ("start", "ec2-fault", short_g), ("end", "ec2-fault", short_g)])
    started = {e["f"]: e["value"] for e in entries[:4] if e["type"] == "start"}
    assert started["imds-fault"]["target"] == {"path": "*/ami-id"}
    assert started["imds-fault"]["kind"] == "latency" and started["imds-fault"]["ms"] == 1
    assert started["ec2-fault"]["target"] == {"action": "CreateNetworkInterface"}
    assert all(v["via"] == "control-api" for v in started.values())
    by = {(e["f"], e["value"]["id"]): e["value"]["by"] for e in entries if e["type"] == "end"}
    assert by == {("imds-fault", fid): "removed", ("ec2-fault", gid): "removed",
                  ("imds-fault", short_f): "expired", ("ec2-fault", short_g): "expired"}
    # The same record for the same spec, whichever API took it.
    records = {e["f"]: e["value"] for e in entries if e["value"]["id"] in (short_f, short_g)
               and e["type"] == "start"}
    assert set(records["imds-fault"]) == set(records["ec2-fault"])
    assert records["imds-fault"]["kind"] == records["ec2-fault"]["kind"] == "latency"


def test_a_fault_added_and_removed_between_two_polls_is_followed(nemesis, parts):
    """The follower reads each API's fault events, not its list of active faults: a fault
    added and removed within one poll (a pasted add-then-clear) is still a start and an
    end, from the gate as from the IMDS."""
    n, h, _, _ = nemesis
    cloud, imds = parts
    follower = n.follow(interval=1.0)  # rounds far apart: both acts fall between two
    try:
        for fc, target in ((FaultClient(cloud.endpoint + "/_cnikit"), {"action": "DescribeImages"}),
                           (FaultClient(imds.control_url), {"path": "*/ami-id"})):
            fc.remove(fc.add("error", target=target))
        wait_for(lambda: len(ops(h)) == 4, 10, "both faults followed, start and end")
    finally:
        follower.stop()
    assert sorted(ops(h)) == [("end", "ec2-fault"), ("end", "imds-fault"),
                              ("start", "ec2-fault"), ("start", "imds-fault")]
    assert all(e["value"]["by"] == "removed" for e in h.entries() if e["type"] == "end")


def test_an_address_taken_from_a_pod_is_one_operation_until_given_back(nemesis):
    n, h, topo, _ = nemesis
    a, b = topo.instances
    ip = f"{topo.subnet_cidr.rsplit('.', 1)[0]}.201"
    n.take_ips(a.primary_eni_id, [ip])
    fid = n.take_held(ip, b.primary_eni_id)
    assert n.cloud.gate.owners().ips[ip].eni_id == b.primary_eni_id
    assert [v["id"] for v in n.in_effect()] == [fid]
    n.give_back(fid, a.primary_eni_id)
    assert n.cloud.gate.owners().ips[ip].eni_id == a.primary_eni_id
    assert ops(h)[-2:] == [("start", "ec2-take-held"), ("end", "ec2-take-held")]
    start, end = [e["value"] for e in h.entries()[-2:]]
    assert start["id"] == end["id"] == fid and start["target"]["from"] == a.primary_eni_id
    assert n.in_effect() == []


def test_restart_all_kills_every_daemon_before_starting_any(nemesis):
    n, h, _, daemons = nemesis
    assert n.restart_all([0, 1]) == {}
    kinds = [c[0] for c in daemons.calls]
    assert kinds[:2] == ["kill", "kill"] and sorted(kinds[2:]) == ["restart", "restart"]
    assert ops(h) == [("start", "daemon-kill"), ("start", "daemon-kill"),
                      ("info", "daemon-restart-all"), ("end", "daemon-kill"),
                      ("end", "daemon-kill")]
    daemons.broken = True
    failed = n.restart_all([1])
    assert list(failed) == [1] and isinstance(failed[1], OSError)
    assert any(v["op"] == "daemon-kill" for v in n.in_effect())  # down until a restart


def test_another_principal_detaches_an_eni_out_of_band(nemesis):
    n, h, topo, _ = nemesis
    c = n.cloud.client()
    eni = c.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
    eni_id = eni["NetworkInterfaceId"]
    c.attach_network_interface(NetworkInterfaceId=eni_id, DeviceIndex=1,
                               InstanceId=topo.instances[0].instance_id)
    n.detach_eni(eni_id)
    assert n.cloud.gate.owners().enis[eni_id].instance_id is None
    rec = [r for r in n.cloud.gate.audit.records() if r.eni_id == eni_id][-1]
    assert rec.action == "DetachNetworkInterface" and rec.principal == OTHER_PRINCIPAL_KEY
    with pytest.raises(ValueError):
        n.detach_eni(eni_id)  # not attached: a failed act, recorded
    assert ops(h)[-2:] == [("info", "ec2-detach"), ("fail", "ec2-detach")]


def test_a_deleted_eni_stays_listed_until_the_next_change_and_its_end_is_recorded_once(
        nemesis, parts):
    """VPC CNI #1008/#2497: the nemesis deletes an ENI while IMDS keeps listing it
    (stale-until-change surviving the detach); the next attach ends the fault by itself,
    and the end is one entry, `by: "ended"` with why, though the follower runs too (and
    the follower never records the nemesis's own start a second time)."""
    n, h, topo, _ = nemesis
    cloud, imds = parts
    inst = topo.instances[0]
    ec2 = cloud.client()

    def new_eni(device: int) -> tuple[str, str]:
        ni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
        ec2.attach_network_interface(NetworkInterfaceId=ni["NetworkInterfaceId"],
                                     InstanceId=inst.instance_id, DeviceIndex=device)
        return ni["NetworkInterfaceId"], ni["MacAddress"].lower()

    view = Imds(imds.url, inst.instance_id)
    eni, mac = new_eni(1)
    wait_for(lambda: mac in (view.text(MACS) or ""), 10, "the IMDS to list the new ENI")
    follower = n.follow(interval=0.05)
    try:
        f = n.imds_fault("stale-until-change", target={"instance_id": inst.instance_id},
                         missed_changes=1)
        n.delete_eni(eni)
        assert eni not in cloud.gate.owners().enis
        assert mac in view.text(MACS)  # still listed: the detach was the missed change
        assert n.imds.await_end(f, 0) is None  # still active
        new_eni(2)
        ev = n.imds.await_end(f, 10)
        assert ev is not None and ev["type"] == "fault_ended" and "change 2" in ev["why"]
        wait_for(lambda: mac not in (view.text(MACS) or ""), 10, "the IMDS to drop the ENI")
        n.end(f)  # already ended: nothing more recorded
    finally:
        follower.stop()
    assert ops(h) == [("start", "imds-fault"), ("info", "ec2-delete-eni"),
                      ("end", "imds-fault")]
    end = [e for e in h.entries() if e["type"] == "end"][0]["value"]
    assert end["by"] == "ended" and "change 2" in end["why"]
    assert n.in_effect() == []
