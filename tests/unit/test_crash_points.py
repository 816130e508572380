"""Crash points (cnikit.cluster.crash_point, the gate's after-call hook point): a node's
daemon is SIGKILLed when the gate serves a given call from it, after the call took effect
and before its answer left. Real parts: moto behind the gate, a real process as each
node's daemon (the kill is a real SIGKILL); the callers name their instance with the
X-Cnikit-Instance-Id header (a node's daemon is told by its source address, which needs
namespaces: the crash-after-* scenarios). A cluster component (an operator) is a real
process calling EC2 itself, told by the connection it holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import boto3
import pytest

from cnikit.check.exposure import judge
from cnikit.check.history import History
from cnikit.cloud.after_call import INSTANCE_HEADER, caller_instance
from cnikit.cluster.actions import Served
from cnikit.cluster.crash_point import CRASH_ACTIONS
from cnikit.cluster.nemesis import Nemesis
from cnikit.targets.connection_owner import holds_connection
from tests.unit.test_layering import http
from tests.waiting import wait_for


class Daemons:
    """One real process per node standing in for its daemon: a kill is a real signal."""

    def __init__(self, instance_ids):
        self.ids = instance_ids
        self.procs = [self._spawn() for _ in instance_ids]
        self.components: dict[str, subprocess.Popen] = {}  # each its own process group

    @staticmethod
    def _spawn():
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def instance_id(self, node):
        return self.ids[node]

    def node_of(self, instance_id):
        return self.ids.index(instance_id) if instance_id in self.ids else None

    def component_calling(self, source, port):
        return next((name for name, p in self.components.items()
                     if holds_connection(p.pid, source, port)), None)

    def signal_component(self, name, sig):
        os.killpg(self.components[name].pid, sig)
        self.components[name].wait(10)

    def signal_daemon(self, node, sig):
        self.procs[node].send_signal(sig)
        self.procs[node].wait(10)

    def stop_and_start_daemon(self, node, wait):
        self.procs[node] = self._spawn()

    def close(self):
        for p in [*self.procs, *self.components.values()]:
            p.kill()
            p.wait(10)


@pytest.fixture
def crash(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=2)
    h = History()
    daemons = Daemons([i.instance_id for i in topo.instances])
    n = Nemesis(h, cloud=gate_cloud, daemons=daemons)
    yield n, h, topo, daemons
    daemons.close()


def client_of(cloud, instance_id: str | None):
    """An EC2 client of its own whose calls say which instance makes them (the kit's shared
    client would keep every header hook registered on it)."""
    env = cloud.client_env()
    c = boto3.session.Session().client(
        "ec2", endpoint_url=env["AWS_ENDPOINT_URL_EC2"], region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    if instance_id:
        c.meta.events.register("before-sign.ec2.*", lambda request, **_: request.headers
                               .__setitem__(INSTANCE_HEADER, instance_id))
    return c


def new_eni(cloud, topo) -> str:
    return cloud.client().create_network_interface(
        SubnetId=topo.subnet_id)["NetworkInterface"]["NetworkInterfaceId"]


def kills(h: History) -> list[dict]:
    return [e["value"] for e in h.entries()
            if e["process"] == "nemesis" and e["f"] == "daemon-kill" and e["type"] == "start"]


def test_crash_after_attach_kills_the_callers_daemon_once_the_attach_took_effect(crash):
    n, h, topo, daemons = crash
    inst = topo.instances[0]
    point = n.crash_at(0, "AttachNetworkInterface")
    eni = new_eni(n.cloud, topo)
    client_of(n.cloud, inst.instance_id).attach_network_interface(
        NetworkInterfaceId=eni, InstanceId=inst.instance_id, DeviceIndex=1)
    fired = point.wait(10)
    assert fired == {"node": 0, "instance_id": inst.instance_id,
                     "action": "AttachNetworkInterface", "eni": eni, "caller": {"node": 0}}
    assert daemons.procs[0].poll() is not None  # killed, before the answer left
    assert daemons.procs[1].poll() is None
    assert n.cloud.gate.owners().enis[eni].instance_id == inst.instance_id  # it took effect
    [kill] = kills(h)
    assert kill["after_call"] == "AttachNetworkInterface" and kill["eni"] == eni
    assert kill["target"] == {"node": 0, "instance_id": inst.instance_id}
    # Fired once: disarmed, the next attach kills nothing more.
    n.restart_daemon(0)
    other = new_eni(n.cloud, topo)
    client_of(n.cloud, inst.instance_id).attach_network_interface(
        NetworkInterfaceId=other, InstanceId=inst.instance_id, DeviceIndex=2)
    assert daemons.procs[0].poll() is None and len(kills(h)) == 1
    assert not n.cloud.gate.after  # no hook left: the gate skips the hook point


def test_other_nodes_calls_unknown_callers_actions_and_failed_calls_do_not_fire(crash):
    n, h, topo, daemons = crash
    mine, theirs = topo.instances
    point = n.crash_at(0, "AssignPrivateIpAddresses")
    try:
        # A call for another node, one about node 0 that no process of the build made (the
        # kit's own), another action, a refusal.
        client_of(n.cloud, theirs.instance_id).assign_private_ip_addresses(
            NetworkInterfaceId=theirs.primary_eni_id, SecondaryPrivateIpAddressCount=1)
        client_of(n.cloud, None).assign_private_ip_addresses(
            NetworkInterfaceId=mine.primary_eni_id, SecondaryPrivateIpAddressCount=1)
        me = client_of(n.cloud, mine.instance_id)
        me.describe_network_interfaces()
        with pytest.raises(Exception, match="PrivateIpAddressLimitExceeded"):
            me.assign_private_ip_addresses(NetworkInterfaceId=mine.primary_eni_id,
                                           SecondaryPrivateIpAddressCount=50)
        assert point.fired is None and point.wait(0) is None
        assert daemons.procs[0].poll() is None and kills(h) == []
        me.assign_private_ip_addresses(NetworkInterfaceId=mine.primary_eni_id,
                                       SecondaryPrivateIpAddressCount=1)
        assert point.wait(10)["eni"] == mine.primary_eni_id
        assert daemons.procs[0].poll() is not None
    finally:
        point.close()


OPERATOR = """
import boto3, sys
boto3.client("ec2").attach_network_interface(NetworkInterfaceId=sys.argv[1],
                                             InstanceId=sys.argv[2], DeviceIndex=1)
print("answered", flush=True)
"""


def test_an_operators_call_for_a_node_fires_that_nodes_point_and_kills_the_operator(crash):
    """A cluster operator makes every EC2 call, from one place, for every node: a call it
    makes about node 1 is node 1's (the instance acted on), and the process killed is the
    operator that made it, before it heard the answer; the nodes' daemons run on."""
    n, h, topo, daemons = crash
    node1 = topo.instances[1]
    other = n.crash_at(0, "AttachNetworkInterface")  # node 0's: never fires on node 1's call
    point = n.crash_at(1, "AttachNetworkInterface")
    eni = new_eni(n.cloud, topo)
    op = daemons.components["operator"] = subprocess.Popen(
        [sys.executable, "-c", OPERATOR, eni, node1.instance_id], stdout=subprocess.PIPE,
        env={**os.environ, **n.cloud.client_env()}, start_new_session=True, text=True)
    try:
        fired = point.wait(60)
    finally:
        other.close()
    assert fired == {"node": 1, "instance_id": node1.instance_id,
                     "action": "AttachNetworkInterface", "eni": eni,
                     "caller": {"component": "operator"}}
    assert op.wait(10) == -signal.SIGKILL and op.stdout.read() == ""  # never heard it
    assert all(p.poll() is None for p in daemons.procs) and kills(h) == []
    assert other.fired is None
    assert n.cloud.gate.owners().enis[eni].instance_id == node1.instance_id  # it took effect
    [kill] = [e["value"] for e in h.entries() if e["f"] == "component-kill"
              and e["type"] == "start"]
    assert kill["target"] == {"component": "operator"}
    assert kill["after_call"] == "AttachNetworkInterface" and kill["for_node"] == 1
    assert [f["line"] for f in judge(h.entries(), [], {}, {})["faults"]] == [
        "the build's component operator was killed right after EC2 served its "
        "AttachNetworkInterface for node 1"]


def test_a_point_says_it_fired_once_its_kill_is_done(crash):
    """A caller restarts the daemon when it sees the point fired: seen any earlier, the
    restart raced the kill (CI: the kill then hit the restarted daemon, unrecorded)."""
    n, h, topo, daemons = crash
    inst = topo.instances[0]
    killing, go = threading.Event(), threading.Event()
    real = daemons.signal_daemon

    def slow_kill(node, sig):
        killing.set()
        go.wait(10)
        real(node, sig)

    daemons.signal_daemon = slow_kill
    point = n.crash_at(0, "AssignPrivateIpAddresses")
    me = client_of(n.cloud, inst.instance_id)
    call = threading.Thread(target=lambda: me.assign_private_ip_addresses(
        NetworkInterfaceId=inst.primary_eni_id, SecondaryPrivateIpAddressCount=1))
    call.start()
    closed: dict = {}
    closer = threading.Thread(target=lambda: closed.update(fired=point.close()))
    try:
        assert killing.wait(10)
        assert point.fired is None and point.wait(0) is None  # the kill is under way
        closer.start()
        closer.join(0.3)
        assert closer.is_alive()  # close waits for the kill under way
    finally:
        go.set()
    closer.join(10)
    call.join(10)
    assert closed["fired"]["action"] == "AssignPrivateIpAddresses"
    assert daemons.procs[0].poll() is not None and len(kills(h)) == 1


def test_a_closed_point_never_fires(crash):
    n, h, topo, daemons = crash
    inst = topo.instances[0]
    with n.crash_at(0, "AssignPrivateIpAddresses") as point:
        pass
    client_of(n.cloud, inst.instance_id).assign_private_ip_addresses(
        NetworkInterfaceId=inst.primary_eni_id, SecondaryPrivateIpAddressCount=1)
    assert point.fired is None and daemons.procs[0].poll() is None and kills(h) == []


def test_an_action_without_a_crash_point_is_one_line(crash):
    n, *_ = crash
    with pytest.raises(ValueError) as e:
        n.crash_at(0, "DescribeNetworkInterfaces")
    assert "\n" not in str(e.value) and "AttachNetworkInterface" in str(e.value)
    assert "DetachNetworkInterface" in CRASH_ACTIONS and not n.cloud.gate.after


def test_the_caller_is_the_header_or_the_instance_holding_its_source_address(crash):
    n, _, topo, _ = crash
    snap = n.cloud.gate.owners()
    inst = topo.instances[1]
    source = snap.enis[inst.primary_eni_id].primary_ip
    assert caller_instance({}, source, snap) == inst.instance_id
    assert caller_instance({INSTANCE_HEADER: "i-named"}, source, snap) == "i-named"
    assert caller_instance({}, "127.0.0.1", snap) is None
    assert caller_instance({}, None, snap) is None


def test_a_hook_that_raises_never_changes_the_answer(crash):
    n, _, topo, _ = crash
    inst = topo.instances[0]
    seen = []

    def broken(call):
        seen.append(call.action)
        raise RuntimeError("a hook's bug")

    hid = n.cloud.gate.after.add(broken)
    try:
        out = client_of(n.cloud, inst.instance_id).assign_private_ip_addresses(
            NetworkInterfaceId=inst.primary_eni_id, SecondaryPrivateIpAddressCount=1)
    finally:
        assert n.cloud.gate.after.remove(hid)
    assert len(out["AssignedPrivateIpAddresses"]) == 1 and seen == ["AssignPrivateIpAddresses"]
    ip = out["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    assert n.cloud.gate.owners().ips[ip].eni_id == inst.primary_eni_id


def test_crash_between_detach_and_delete(crash):
    """Killed after the detach: the ENI is left detached, its delete never sent."""
    n, h, topo, daemons = crash
    inst = topo.instances[0]
    me = client_of(n.cloud, inst.instance_id)
    eni = new_eni(n.cloud, topo)
    att = me.attach_network_interface(NetworkInterfaceId=eni, InstanceId=inst.instance_id,
                                      DeviceIndex=1)["AttachmentId"]
    with n.crash_at(0, "DetachNetworkInterface") as point:
        me.detach_network_interface(AttachmentId=att)
        fired = point.wait(10)
    assert fired["action"] == "DetachNetworkInterface" and fired["attachment"] == att
    assert daemons.procs[0].poll() is not None
    [kill] = kills(h)
    assert kill["after_call"] == "DetachNetworkInterface"
    assert eni in n.cloud.gate.owners().enis  # still there: no delete followed


# -- the same, and the other nemesis actions, over the gate's $GATE/nemesis ----------------

@pytest.fixture
def served(crash):
    n, h, topo, daemons = crash
    gate = n.cloud.gate
    gate.serve_nemesis(Served(n, len(topo.instances)))
    yield n, h, topo, daemons, n.cloud.endpoint + "/_cnikit/nemesis"
    gate.serve_nemesis(None)
    for point in list(n.crash_points.values()):
        point.close()


def test_a_crash_point_armed_over_http_fires_and_is_listed(served):
    n, h, topo, daemons, url = served
    inst = topo.instances[1]
    status, body = http("POST", url, {"action": "crash-at", "node": 1,
                                      "after": "AssignPrivateIpAddresses"})
    assert status == 200, body
    armed = json.loads(body)["result"]
    assert armed["armed"] and armed["node"] == 1
    client_of(n.cloud, inst.instance_id).assign_private_ip_addresses(
        NetworkInterfaceId=inst.primary_eni_id, SecondaryPrivateIpAddressCount=1)
    wait_for(lambda: daemons.procs[1].poll() is not None, 10, "node 1's daemon killed")
    points = json.loads(http("GET", url)[1])["crash_points"]
    [mine] = [p for p in points if p["id"] == armed["id"]]
    assert mine["fired"]["action"] == "AssignPrivateIpAddresses"
    assert [k["after_call"] for k in kills(h)] == ["AssignPrivateIpAddresses"]
    # Restarted over the same route: the kill's down time ends.
    status, body = http("POST", url, {"action": "restart", "node": 1})
    assert status == 200, body
    assert daemons.procs[1].poll() is None
    assert any(e["f"] == "daemon-kill" and e["type"] == "end" for e in h.entries())


def test_every_action_is_described_and_a_bad_one_is_refused_in_one_line(served):
    n, h, topo, daemons, url = served
    listed = json.loads(http("GET", url)[1])["actions"]
    assert {"kill", "restart", "restart-all", "crash-at", "sweep-enis", "unassign",
            "detach-eni"} <= set(listed)
    assert all(a["description"] and a["why"] for a in listed.values())
    for spec, reason in [
        ({"action": "reboot"}, "unknown nemesis action 'reboot'"),
        ({"action": "kill"}, "kill needs 'node'"),
        ({"action": "kill", "node": 2}, "node must be one of 0..1, got 2"),
        ({"action": "kill", "node": 0, "colour": "red"}, "unknown field 'colour' for kill"),
        ({"action": "crash-at", "node": 0, "after": "DescribeVpcs"}, "after must be one of"),
        ({"action": "unassign", "ip": "10.0.0.300"}, "ip must be an IPv4 address"),
        ([1, 2], "body must be a JSON object"),
    ]:
        status, body = http("POST", url, spec)
        error = json.loads(body)["error"]
        assert status == 400 and reason in error and "\n" not in error, (spec, body)
    assert kills(h) == [] and all(p.poll() is None for p in daemons.procs)  # nothing done
    # An act EC2 refuses: 409, one line, recorded as the nemesis's failed act.
    status, body = http("POST", url, {"action": "detach-eni", "eni": "eni-00000000"})
    assert status == 409 and "detach-eni failed" in json.loads(body)["error"]
    assert any(e["type"] == "fail" and e["f"] == "ec2-detach" for e in h.entries())


def test_a_gate_serving_no_run_has_no_nemesis(crash):
    n, *_ = crash
    status, body = http("GET", n.cloud.endpoint + "/_cnikit/nemesis")
    assert status == 404 and "cnikit up" in json.loads(body)["error"]
