"""EC2 faults on the gate (throttle, error, latency, lost-response, describe-lag), their HTTP
API, the audit log."""

from __future__ import annotations

import json
import time

import boto3
import botocore.config
import pytest
import urllib3
from botocore.exceptions import ClientError

from cnikit.cloud.faults import FaultSet
from cnikit.errors import UsageError
from tests.waiting import wait_for

SEED = 20261130


def error_of(call) -> tuple[str, int]:
    with pytest.raises(ClientError) as exc:
        call()
    r = exc.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def test_throttle_one_action_only(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    cloud.gate.faults.add("throttle", target={"action": "AssignPrivateIpAddresses"})
    assert error_of(lambda: ec2.assign_private_ip_addresses(
        NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)) == ("RequestLimitExceeded", 503)
    ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])  # other actions pass
    assert cloud.gate.owners().enis[eni].ips == [topo.instances[0].primary_ip]
    outcome = [r.outcome for r in cloud.gate.audit.records()
               if r.eni_id == eni and r.action == "AssignPrivateIpAddresses"]
    assert outcome[-1] == "RequestLimitExceeded"


def test_throttle_token_bucket():
    faults = FaultSet(seed=SEED)
    faults.add("throttle", target={"action": "DescribeNetworkInterfaces"}, rate=5, burst=3)
    outcomes = [faults.on_request("DescribeNetworkInterfaces")[1] is None for _ in range(10)]
    assert outcomes[:3] == [True, True, True] and not any(outcomes[3:])
    assert faults.on_request("AssignPrivateIpAddresses") == (0.0, None)
    time.sleep(0.25)  # the bucket refills at 5/s: about one token
    assert faults.on_request("DescribeNetworkInterfaces")[1] is None


def test_probability_is_seeded_and_applied():
    print(f"seed={SEED}")
    hits = []
    for _ in range(2):
        faults = FaultSet(seed=SEED)
        faults.add("error", probability=0.3)
        hits.append([faults.on_request("X")[1] is not None for _ in range(400)])
    assert hits[0] == hits[1]  # same seed, same dice
    assert 80 <= sum(hits[0]) <= 160


def test_error_kinds(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    fid = cloud.gate.faults.add("error", target={"action": "DescribeNetworkInterfaces"})
    assert error_of(lambda: ec2.describe_network_interfaces()) == ("InternalError", 500)
    cloud.gate.faults.remove(fid)
    cloud.gate.faults.add("error", target={"action": "DescribeNetworkInterfaces"},
                          code="Unavailable")
    assert error_of(lambda: ec2.describe_network_interfaces()) == ("Unavailable", 503)
    cloud.gate.faults.clear()
    ec2.describe_network_interfaces()


def test_latency_with_jitter(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    cloud.gate.faults.add("latency", target={"action": "DescribeNetworkInterfaces"}, ms=150,
                          jitter_ms=50)
    started = time.monotonic()
    ec2.describe_network_interfaces(NetworkInterfaceIds=[topo.instances[0].primary_eni_id])
    assert time.monotonic() - started >= 0.1  # 150 ms +- 50 ms, as the IMDS's jitter


def test_lost_response_changes_ec2_and_answers_an_error(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    ips = [a["PrivateIpAddress"] for a in ec2.assign_private_ip_addresses(
        NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=2)["AssignedPrivateIpAddresses"]]
    cloud.gate.faults.add("lost-response", target={"action": "UnassignPrivateIpAddresses"})
    once = boto3.client("ec2", endpoint_url=cloud.endpoint, region_name=cloud.region,
                        aws_access_key_id="test", aws_secret_access_key="test",
                        config=botocore.config.Config(retries={"total_max_attempts": 1}))
    assert error_of(lambda: once.unassign_private_ip_addresses(
        NetworkInterfaceId=eni, PrivateIpAddresses=[ips[0]])) == ("InternalError", 500)
    assert ips[0] not in cloud.gate.owners().enis[eni].ips, "the change stands"
    # botocore retries a 500 (the kit's client once): the retry meets the new state, as
    # after a real timeout, and EC2 refuses it.
    code, _ = error_of(lambda: ec2.unassign_private_ip_addresses(
        NetworkInterfaceId=eni, PrivateIpAddresses=[ips[1]]))
    assert code == "InvalidParameterValue" and ips[1] not in cloud.gate.owners().enis[eni].ips
    # Read calls and refused calls are never "lost": only a change EC2 made.
    cloud.gate.faults.clear()
    cloud.gate.faults.add("lost-response")
    ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])
    assert error_of(lambda: ec2.unassign_private_ip_addresses(
        NetworkInterfaceId=eni, PrivateIpAddresses=[ips[0]]))[0] == "InvalidParameterValue"


def test_fault_expires_by_itself(gate_fault_vpc):
    cloud, _ = gate_fault_vpc
    cloud.gate.faults.add("error", duration=0.3)
    assert cloud.gate.faults.list()
    wait_for(lambda: not cloud.gate.faults.list(), 5)
    cloud.client().describe_network_interfaces()


def test_describe_lag_shows_old_state_then_catches_up(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    cloud.gate.faults.add("describe-lag", seconds=1.0)

    def visible():
        try:
            return ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])
        except ClientError as e:  # the ENI was created less than a lag ago: not yet seen
            assert e.response["Error"]["Code"] == "InvalidNetworkInterfaceID.NotFound"
            return None

    wait_for(visible, 5)
    new = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)[
        "AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    assigned_at = time.monotonic()

    def shown():
        e = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
        return [a["PrivateIpAddress"] for a in e["PrivateIpAddresses"]]

    assert new not in shown()
    assert new in cloud.gate.owners().enis[eni].ips  # the truth is never lagged
    wait_for(lambda: new in shown(), 5)
    assert time.monotonic() - assigned_at >= 0.9


def test_fault_set_refuses_bad_specs():
    faults = FaultSet()
    for kind, attrs in [("nope", {}), ("throttle", {"probability": 2}), ("latency", {"ms": -1}),
                        ("error", {"code": "no such code!"}), ("throttle", {"colour": "red"}),
                        ("latency", {"ms": "fast"})]:
        with pytest.raises(UsageError):
            faults.add(kind, **attrs)
    assert faults.list() == []


def test_fault_and_audit_http_api(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    http = urllib3.PoolManager()
    base = cloud.endpoint + "/_cnikit/faults"
    r = http.request("POST", base, body=json.dumps({"kind": "throttle", "probability": 1,
                                                    "target": {"action": "DescribeInstances"}}))
    assert r.status == 201
    fid = json.loads(r.data)["id"]
    assert [f["id"] for f in json.loads(http.request("GET", base).data)["faults"]] == [fid]
    assert error_of(lambda: cloud.client().describe_instances())[0] == "RequestLimitExceeded"
    for bad in [b"{", json.dumps({"kind": "nope"}).encode(), json.dumps([1]).encode(),
                json.dumps({"kind": "latency", "ms": "x"}).encode()]:
        r = http.request("POST", base, body=bad)
        assert r.status == 400 and "error" in json.loads(r.data)
    # The shape before the fault IMDS's: refused, saying where the field goes now.
    r = http.request("POST", base, body=json.dumps({"kind": "throttle",
                                                    "action": "DescribeInstances"}))
    assert r.status == 400 and json.loads(r.data)["error"] == (
        '\'action\' goes in the target: "target": {"action": ...}')
    assert [f["id"] for f in json.loads(http.request("GET", base).data)["faults"]] == [fid]
    assert http.request("DELETE", f"{base}/{fid}").status == 200
    assert http.request("DELETE", f"{base}/{fid}").status == 404
    assert http.request("DELETE", base).status == 200
    cloud.client().describe_instances()
    audit = json.loads(http.request("GET", cloud.endpoint + "/_cnikit/audit").data)
    runs = [a for a in audit if a["action"] == "RunInstances"
            and a["instance_id"] == topo.instances[0].instance_id]
    assert runs and runs[0]["ips"] == [topo.instances[0].primary_ip] and runs[0]["outcome"] == "ok"
    assert {"time", "action", "eni_id", "ips", "prefixes", "outcome"} <= set(audit[0])


def test_a_misspelt_action_is_refused_with_the_action_meant(gate_cloud):
    """An action EC2 does not have would match no call: the fault would never fire. The
    gate refuses it (400, one line) and names the closest action EC2 has."""
    http = urllib3.PoolManager()
    base = gate_cloud.endpoint + "/_cnikit/faults"
    before = json.loads(http.request("GET", base).data)["faults"]
    for typo, meant in (("AssignPrivateIpAddress", "AssignPrivateIpAddresses"),
                        ("describeNetworkInterfaces", "DescribeNetworkInterfaces")):
        r = http.request("POST", base, body=json.dumps({"kind": "throttle",
                                                        "target": {"action": typo}}))
        error = json.loads(r.data)["error"]
        assert r.status == 400 and error == (f"target action {typo!r} is not an EC2 action; "
                                             f"did you mean {meant!r}?"), error
    r = http.request("POST", base, body=json.dumps({"kind": "error",
                                                    "target": {"action": "Frobnicate"}}))
    assert r.status == 400 and json.loads(r.data)["error"] == (
        "target action 'Frobnicate' is not an EC2 action")
    assert json.loads(http.request("GET", base).data)["faults"] == before
    # An action EC2 has that the gate forwards untouched is a fine target.
    with pytest.raises(UsageError):
        gate_cloud.gate.faults.add("throttle", target={"action": "DescribeVpc"})
    gate_cloud.gate.faults.remove(gate_cloud.gate.faults.add(
        "throttle", target={"action": "DescribeVpcEndpoints"}))


def _fault_api_session(http, base: str, spec: dict) -> list[tuple[str, int, object]]:
    """The same conversation with a fault API: what each answer's status and shape are."""
    out = []

    def call(what, method, path="", body=None, headers=None):
        r = http.request(method, base + path, body=body, headers=headers)
        payload = json.loads(r.data)
        out.append((what, r.status, payload))
        return payload

    added = call("add", "POST", "", json.dumps(spec))
    call("list", "GET")
    call("remove", "DELETE", "/" + added["id"])
    call("remove again", "DELETE", "/" + added["id"])
    call("add 2", "POST", "", json.dumps(spec))
    call("add 3", "POST", "", json.dumps(spec))
    call("clear", "DELETE")
    call("list empty", "GET")
    call("not JSON", "POST", "", b"{")
    call("not an object", "POST", "", b"[1]")
    call("unknown kind", "POST", "", json.dumps({"kind": "nope"}))
    return out


def test_gate_and_imds_fault_apis_answer_the_same_shapes(gate_cloud, gate_new_vpc):
    """One shape for both fault APIs: the same body (kind, target, duration, probability,
    the kind's attributes); 201 {id, fault} on add, {"faults": [...]} on list, {"removed":
    [ids]} on remove and clear, 404 for an unknown id, 400 {"error"} otherwise."""
    from fault_imds.server import ImdsServer

    topo = gate_new_vpc(gate_cloud, nodes=1)
    http = urllib3.PoolManager()
    common = {"kind": "error", "duration": 60, "probability": 0.5}
    with ImdsServer(ec2_endpoint=gate_cloud.endpoint, seed=SEED) as imds:
        imds_talk = _fault_api_session(http, imds.control_url + "/faults",
                                       {**common, "target": {"path": "*/ami-id"}, "status": 503})
    gate_talk = _fault_api_session(http, gate_cloud.endpoint + "/_cnikit/faults",
                                   {**common, "target": {"action": "DescribeImages"},
                                    "code": "Unavailable"})
    imds_fault, gate_fault = imds_talk[0][2]["fault"], gate_talk[0][2]["fault"]
    assert set(imds_fault) - {"status"} == set(gate_fault) - {"code", "message", "status"} == {
        "id", "kind", "target", "duration", "probability", "created", "expires"}
    assert imds_fault["target"] == {"path": "*/ami-id"}
    assert gate_fault["target"] == {"action": "DescribeImages"}
    assert imds_fault["probability"] == gate_fault["probability"] == 0.5
    assert [(w, s) for w, s, _ in imds_talk] == [(w, s) for w, s, _ in gate_talk] == [
        ("add", 201), ("list", 200), ("remove", 200), ("remove again", 404), ("add 2", 201),
        ("add 3", 201), ("clear", 200), ("list empty", 200), ("not JSON", 400),
        ("not an object", 400), ("unknown kind", 400)]
    for (what, _, a), (_, _, b) in zip(imds_talk, gate_talk, strict=True):
        assert set(a) == set(b), what
        if what in ("add", "add 2", "add 3"):
            assert a["fault"]["id"] == a["id"] and b["fault"]["id"] == b["id"]
            assert a["fault"]["kind"] == b["fault"]["kind"] == "error"
        if what == "list":
            assert [f["id"] for f in a["faults"]] == [imds_talk[0][2]["id"]]
            assert [f["id"] for f in b["faults"]] == [gate_talk[0][2]["id"]]
        if what == "remove":
            assert a == {"removed": [imds_talk[0][2]["id"]]}
            assert b == {"removed": [gate_talk[0][2]["id"]]}
        if what == "clear":
            assert a["removed"] == [imds_talk[4][2]["id"], imds_talk[5][2]["id"]]
            assert b["removed"] == [gate_talk[4][2]["id"], gate_talk[5][2]["id"]]
        if "error" in a:
            assert "\n" not in a["error"] and "\n" not in b["error"]
    assert topo.instances  # the IMDS had an instance to serve


def test_fault_client_drives_the_gate(gate_cloud, gate_new_vpc):
    from fault_imds.client import FaultClient, FaultError

    gate_new_vpc(gate_cloud, nodes=1)
    fc = FaultClient(gate_cloud.endpoint + "/_cnikit")
    with fc.add("throttle", target={"action": "DescribeInstances"}) as fid:
        assert [f["id"] for f in fc.list()] == [fid] and fid.fault["kind"] == "throttle"
        assert error_of(lambda: gate_cloud.client().describe_instances())[0] == \
            "RequestLimitExceeded"
    assert fc.list() == [] and fc.remove(fid) is False
    gate_cloud.client().describe_instances()
    with pytest.raises(FaultError, match="unknown EC2 fault kind"):
        fc.add("nope")
    a, b = fc.add("latency", ms=1), fc.add("error", target={"action": "DescribeImages"})
    assert fc.clear() == [a, b]


def test_gate_refuses_a_huge_content_length_at_once(gate_cloud):
    import socket
    import urllib.parse

    u = urllib.parse.urlsplit(gate_cloud.endpoint)
    request = (b"POST /_cnikit/faults HTTP/1.1\r\nHost: localhost\r\n"
               b"Content-Length: 1000000000\r\n\r\n{\"kind\": \"error\"}")
    with socket.create_connection((u.hostname, u.port), timeout=1.0) as s:
        start = time.monotonic()
        s.sendall(request)
        data = b""
        while not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)  # socket.timeout after 1 s fails the test
            if not chunk:
                break
            data += chunk
    assert time.monotonic() - start < 1.0
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"413", data
    assert "Content-Length" in json.loads(body)["error"]
    assert gate_cloud.gate.faults.list() == []


def test_throttle_scopes_share_buckets_and_count_refusals():
    t0 = time.monotonic()
    faults = FaultSet(seed=SEED)
    acct = faults.add("throttle", rate=0.01, burst=2, scope="account")
    # One bucket for every action (and every node: the gate's calls all pass here).
    outcomes = [faults.on_request(a)[1] is None for a in
                ("DescribeNetworkInterfaces", "AssignPrivateIpAddresses", "DescribeInstances")]
    assert outcomes == [True, True, False]
    assert faults.get(acct).refused_since(t0) == 1
    assert faults.get(acct).refused_since(time.monotonic() + 1) == 0
    faults.clear()
    faults.add("throttle", rate=0.01, burst=1, scope="category")
    assert faults.on_request("DescribeNetworkInterfaces")[1] is None
    assert faults.on_request("DescribeInstances")[1] is not None  # reads share a bucket
    assert faults.on_request("AssignPrivateIpAddresses")[1] is None  # mutating: its own
    assert faults.get("nope") is None
    with pytest.raises(UsageError):
        faults.add("throttle", rate=1, scope="node")


def test_audit_names_the_principal(gate_fault_vpc):
    from cnikit.check.history import History
    from cnikit.cluster.nemesis import Nemesis
    from cnikit.cluster.nemesis_ec2_acts import OTHER_PRINCIPAL

    cloud, topo = gate_fault_vpc
    eni = topo.instances[0].primary_eni_id
    ip = cloud.client().assign_private_ip_addresses(
        NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1
    )["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    history = History()
    n = Nemesis(history, cloud=cloud)
    assert n.unassign(ip, other=True) == eni
    recs = [r for r in cloud.gate.audit.records() if r.eni_id == eni]
    assert recs[-2].action == "AssignPrivateIpAddresses" and recs[-2].principal == "test"
    assert recs[-1].action == "UnassignPrivateIpAddresses"
    assert recs[-1].principal == OTHER_PRINCIPAL["AWS_ACCESS_KEY_ID"]
    # The other principal's sweep deletes available ENIs carrying the cluster's tag only.
    subnet = topo.subnet_id
    tagged = cloud.client().create_network_interface(SubnetId=subnet, TagSpecifications=[
        {"ResourceType": "network-interface",
         "Tags": [{"Key": "cluster.k8s.amazonaws.com/name", "Value": "cnikit"}]}])
    plain = cloud.client().create_network_interface(SubnetId=subnet)
    swept = n.sweep_enis()
    tid = tagged["NetworkInterface"]["NetworkInterfaceId"]
    assert tid in swept and plain["NetworkInterface"]["NetworkInterfaceId"] not in swept
    assert tid not in cloud.gate.owners().enis
    ops = [e["value"]["op"] for e in history.entries() if e.get("process") == "nemesis"]
    assert ops == ["ec2-unassign", "ec2-sweep-enis"]
