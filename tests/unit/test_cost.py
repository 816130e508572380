"""The cost lane (cnikit.check.cost): waste judged from the gate's audit, never a verdict.

The rules are fed audit records as the gate writes them (AuditRecord as JSON); the last test
has the gate itself write them, to show it tells a fault's refusal from EC2's own."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from cnikit.check import cost
from cnikit.check.cost.eni_churn import MIN_LIFETIME_S
from cnikit.check.cost.refused_over_limit import AT_LEAST
from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY

BUILD = "testing"  # the reference daemon's access key
ENI, NODE = "eni-0a", "i-0a"


def call(t, action, eni=ENI, outcome="ok", ips=(), principal=BUILD, injected=False,
         instance=None):
    return {"time": t, "action": action, "eni_id": eni, "ips": list(ips), "prefixes": [],
            "outcome": outcome, "instance_id": instance, "region": "us-east-1",
            "principal": principal, "injected": injected}


def refusals(n, **kw):
    return [call(100 + i * 0.1, "AssignPrivateIpAddresses",
                 outcome="PrivateIpAddressLimitExceeded", **kw) for i in range(n)]


def pod_add(ip):
    return {"process": "client", "type": "ok", "f": "pod-add",
            "value": {"pod": "p" + ip, "node": 0, "instance_id": NODE, "ip": ip}}


def kinds(findings):
    return [f["kind"] for f in findings]


def test_a_stream_of_refusals_over_a_limit_is_a_finding_a_few_are_not():
    found = cost.judge(refusals(AT_LEAST), [])
    assert kinds(found) == ["refused-over-limit"]
    f = found[0]
    assert (f["subject"], f["count"]) == (ENI, AT_LEAST)
    assert f["what"].startswith(f"EC2 refused {AT_LEAST} AssignPrivateIpAddresses calls on "
                                f"{ENI} with PrivateIpAddressLimitExceeded in ")
    assert cost.lines(found) == [f"cost: refused-over-limit: {f['what']}"]
    # A race any design may lose now and then is no stream.
    assert cost.judge(refusals(AT_LEAST - 1), []) == []


@pytest.mark.parametrize("kw", [{"injected": True}, {"principal": OTHER_PRINCIPAL_KEY},
                                {"principal": ""}])
def test_refusals_the_build_did_not_earn_are_not_its_waste(kw):
    """A fault's answer, another principal's calls and the kit's own acts."""
    assert cost.judge(refusals(3 * AT_LEAST, **kw), []) == []


def test_refusals_on_an_eni_the_nemesis_acted_on_are_left_out():
    touched = {"process": "nemesis", "type": "info", "f": "ec2-take-held",
               "value": {"op": "ec2-take-held", "target": {"eni": ENI}}}
    assert cost.judge(refusals(3 * AT_LEAST), [touched]) == []


def lifecycle(attach_at, lived, ips=("10.0.1.20",), eni=ENI):
    return [call(attach_at - 0.1, "CreateNetworkInterface", eni=eni, ips=ips),
            call(attach_at, "AttachNetworkInterface", eni=eni, ips=ips, instance=NODE),
            call(attach_at + lived, "DetachNetworkInterface", eni=eni, ips=ips, instance=NODE),
            call(attach_at + lived + 0.1, "DeleteNetworkInterface", eni=eni, ips=ips)]


def test_an_eni_freed_unused_within_the_minimum_lifetime_is_churn():
    scale = 0.05
    bound = MIN_LIFETIME_S * scale
    found = cost.judge(lifecycle(100, bound / 2) + lifecycle(110, bound / 3, eni="eni-0b"), [],
                       {NODE: "n0"}, scale)
    assert kinds(found) == ["eni-churn"]
    assert (found[0]["subject"], found[0]["count"]) == ("n0", 2)
    assert "eni-0a after 1.5s" in found[0]["what"] and "eni-0b after 1.0s" in found[0]["what"]
    # Older than the lifetime: a warm ENI given back, as any design may.
    assert cost.judge(lifecycle(100, bound * 1.1), [], {NODE: "n0"}, scale) == []
    # A pod had one of its addresses: it served.
    assert cost.judge(lifecycle(100, bound / 2), [pod_add("10.0.1.20")], {NODE: "n0"},
                      scale) == []
    # Detached by another principal (an operator, another node's sweep): not the build's.
    other = lifecycle(100, bound / 2)
    other[2] = {**other[2], "principal": OTHER_PRINCIPAL_KEY}
    assert cost.judge(other, [], {NODE: "n0"}, scale) == []


def test_every_rule_names_its_incident():
    assert set(cost.RULES) >= {"refused-over-limit", "eni-churn"}
    for kind, rule in cost.RULES.items():
        assert rule.kind == kind and "#" in rule.why, kind


def test_the_gate_tells_a_faults_refusal_from_ec2s_own(gate_fault_vpc):
    cloud, topo = gate_fault_vpc  # m5.large: 10 addresses per ENI
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=9)
    t0 = cloud.gate.audit.records()[-1].time
    with pytest.raises(ClientError, match="PrivateIpAddressLimitExceeded"):
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
    cloud.gate.faults.add("error", target={"action": "AssignPrivateIpAddresses"},
                          code="PrivateIpAddressLimitExceeded")
    try:
        with pytest.raises(ClientError, match="PrivateIpAddressLimitExceeded"):
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                            SecondaryPrivateIpAddressCount=1)
    finally:
        cloud.gate.faults.clear()
    got = [(r.outcome, r.injected) for r in cloud.gate.audit.records()
           if r.time > t0 and r.action == "AssignPrivateIpAddresses"]
    assert got == [("PrivateIpAddressLimitExceeded", False), ("PrivateIpAddressLimitExceeded", True)]
    ec2.unassign_private_ip_addresses(
        NetworkInterfaceId=eni,
        PrivateIpAddresses=[a["PrivateIpAddress"] for a in ec2.describe_network_interfaces(
            NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]["PrivateIpAddresses"]
            if not a["Primary"]])


def test_calling_again_at_once_after_a_throttle_is_a_finding_a_backoff_is_not():
    from cnikit.check.cost.throttle_no_backoff import AT_LEAST, AT_ONCE_S

    def throttled(times, instance=NODE):
        return [{"time": t, "action": "DescribeNetworkInterfaces", "instance_id": instance}
                for t in times]

    at_once = [100 + i * 0.6 + d for i in range(AT_LEAST) for d in (0.0, AT_ONCE_S / 5)]
    found = cost.judge([], [], {NODE: "n0"}, 0.05, throttled(at_once))
    assert kinds(found) == ["throttle-no-backoff"]
    assert (found[0]["subject"], found[0]["count"]) == ("n0", AT_LEAST)
    # The same calls, each after a back-off of a tenth of a second or more.
    backed_off = [100 + i * 0.3 for i in range(2 * AT_LEAST)]
    assert cost.judge([], [], {NODE: "n0"}, 0.05, throttled(backed_off)) == []
    # Two nodes each backing off, their calls interleaved: each node is judged by its own.
    both = throttled(backed_off) + throttled([t + AT_ONCE_S / 5 for t in backed_off], "i-0b")
    assert cost.judge([], [], {NODE: "n0", "i-0b": "n1"}, 0.05, both) == []
    # Ten at once among many more backed-off calls: two threads throttled together now and
    # then, not a loop.
    mixed = sorted(at_once + [200 + i * 0.3 for i in range(4 * AT_LEAST)])
    assert cost.judge([], [], {NODE: "n0"}, 0.05, throttled(mixed)) == []
    # A caller the gate could not name is nobody's.
    assert cost.judge([], [], {}, 0.05, throttled(at_once, instance=None)) == []


def test_the_gate_logs_each_throttled_call_reads_included_with_its_caller(gate_fault_vpc):
    cloud, _topo = gate_fault_vpc
    ec2 = cloud.client()
    before = len(cloud.gate.audit.throttled())
    cloud.gate.faults.add("throttle", target={"action": "DescribeNetworkInterfaces"})
    try:
        with pytest.raises(ClientError, match="RequestLimitExceeded"):
            ec2.describe_network_interfaces()
    finally:
        cloud.gate.faults.clear()
    got = cloud.gate.audit.throttled()[before:]
    # The kit's client retries once (botocore's max_attempts counts retries): two calls.
    assert [(t.action, t.source) for t in got] == [("DescribeNetworkInterfaces", "127.0.0.1")] * 2
    assert not [r for r in cloud.gate.audit.records() if r.action == "DescribeNetworkInterfaces"]
