"""The daemon's EC2 client (cnikit.daemon.ec2_query): the same requests as botocore's
serializer and signer, the same answers as boto3 from moto behind the gate, and botocore's
standard retries."""

from __future__ import annotations

import datetime
import http.server
import threading
import urllib.parse

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.serialize
import botocore.session
import pytest

from cnikit.daemon import ec2_query
from cnikit.daemon.apis import ApiError
from cnikit.daemon.ec2_query import QueryEc2, Signer

OK = b'<R xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><return>true</return></R>'

# (our method and arguments, botocore's operation and parameters for the same request)
CALLS = [
    (("describe_instance", "i-1"), ("DescribeInstances", {"InstanceIds": ["i-1"]})),
    (("instance_limits", "m5.large"),
     ("DescribeInstanceTypes", {"InstanceTypes": ["m5.large"]})),
    (("describe_enis", "i-1"), ("DescribeNetworkInterfaces", {
        "Filters": [{"Name": "attachment.instance-id", "Values": ["i-1"]}]})),
    (("describe_eni", "eni-1"), ("DescribeNetworkInterfaces", {"NetworkInterfaceIds": ["eni-1"]})),
    (("describe_tagged_enis", "node.k8s.amazonaws.com/instance_id", "i-1"),
     ("DescribeNetworkInterfaces", {"Filters": [
         {"Name": "tag:node.k8s.amazonaws.com/instance_id", "Values": ["i-1"]}]})),
    (("create_eni", "subnet-1", ["sg-1", "sg-2"], {"a": "1", "b": "2"}, 3),
     ("CreateNetworkInterface", {
         "SubnetId": "subnet-1", "Description": "aws-K8S-cnikit", "Groups": ["sg-1", "sg-2"],
         "SecondaryPrivateIpAddressCount": 3, "TagSpecifications": [
             {"ResourceType": "network-interface",
              "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]}]})),
    (("describe_subnets", "vpc-1", "us-east-1a"), ("DescribeSubnets", {"Filters": [
        {"Name": "vpc-id", "Values": ["vpc-1"]},
        {"Name": "availability-zone", "Values": ["us-east-1a"]}]})),
    (("attach_eni", "eni-1", "i-1", 2), ("AttachNetworkInterface", {
        "NetworkInterfaceId": "eni-1", "InstanceId": "i-1", "DeviceIndex": 2})),
    (("detach_eni", "eni-attach-1"),
     ("DetachNetworkInterface", {"AttachmentId": "eni-attach-1", "Force": True})),
    (("delete_eni", "eni-1"), ("DeleteNetworkInterface", {"NetworkInterfaceId": "eni-1"})),
    (("assign_ips", "eni-1", 2), ("AssignPrivateIpAddresses", {
        "NetworkInterfaceId": "eni-1", "SecondaryPrivateIpAddressCount": 2})),
    (("unassign_ips", "eni-1", ["10.0.0.5", "10.0.0.6"]), ("UnassignPrivateIpAddresses", {
        "NetworkInterfaceId": "eni-1", "PrivateIpAddresses": ["10.0.0.5", "10.0.0.6"]})),
    (("assign_prefixes", "eni-1", 1), ("AssignPrivateIpAddresses", {
        "NetworkInterfaceId": "eni-1", "Ipv4PrefixCount": 1})),
    (("unassign_prefixes", "eni-1", ["10.0.0.16/28"]), ("UnassignPrivateIpAddresses", {
        "NetworkInterfaceId": "eni-1", "Ipv4Prefixes": ["10.0.0.16/28"]})),
]


@pytest.fixture(scope="module")
def ec2_model():
    return botocore.session.get_session().get_service_model("ec2")


@pytest.mark.parametrize(("ours", "theirs"), CALLS, ids=[c[0][0] for c in CALLS])
def test_requests_are_botocores(ours, theirs, ec2_model, monkeypatch):
    sent = []

    def once(self, action, body):
        sent.append(dict(urllib.parse.parse_qsl(body.decode())))
        return 200, OK

    monkeypatch.setattr(QueryEc2, "_once", once)
    client = QueryEc2("http://127.0.0.1:1", "us-east-1")
    try:
        getattr(client, ours[0])(*ours[1:])
    except ApiError:
        pass  # the canned answer holds no interface: the request is what is checked
    op, kw = theirs
    want = botocore.serialize.create_serializer("ec2").serialize_to_request(
        kw, ec2_model.operation_model(op))["body"]
    assert sent[0] == {k: str(v) for k, v in want.items()}


def test_signature_is_botocores():
    now = datetime.datetime(2026, 12, 2, 3, 4, 5, tzinfo=datetime.UTC)
    body = b"Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-1"
    ours = Signer("eu-west-1", "AKIDEXAMPLE", "secret").headers("127.0.0.1:5000", body, now)

    req = botocore.awsrequest.AWSRequest(
        method="POST", url="http://127.0.0.1:5000/", data=body,
        headers={k: v for k, v in ours.items() if k != "authorization"})
    req.context["timestamp"] = now.strftime("%Y%m%dT%H%M%SZ")
    auth = botocore.auth.SigV4Auth(
        botocore.credentials.Credentials("AKIDEXAMPLE", "secret"), "ec2", "eu-west-1")
    canonical = auth.canonical_request(req)
    signature = auth.signature(auth.string_to_sign(req, canonical), req)
    assert ours["authorization"].endswith(f"Signature={signature}")
    assert "Credential=AKIDEXAMPLE/20261202/eu-west-1/ec2/aws4_request" in ours["authorization"]


def test_answers_are_boto3s(gate_cloud, gate_new_vpc):
    """Every operation against moto behind the gate, read back with boto3."""
    topo = gate_new_vpc(gate_cloud, nodes=1)
    inst = topo.instances[0]
    boto = gate_cloud.client()
    ec2 = QueryEc2(gate_cloud.endpoint, gate_cloud.region)

    info = ec2.describe_instance(inst.instance_id)
    assert (info.instance_type, info.subnet_id, info.primary_eni_id, info.vpc_id, info.az) == \
        ("m5.large", topo.subnet_id, inst.primary_eni_id, topo.vpc_id, topo.az)
    other = gate_cloud.add_subnet(topo, topo.vpc_cidr.replace(".0.0/16", ".7.0/28"),
                                  {"kubernetes.io/role/cni": "1"})
    listed = {s.subnet_id: s for s in ec2.describe_subnets(topo.vpc_id, topo.az)}
    theirs = {s["SubnetId"]: s for s in boto.describe_subnets(SubnetIds=list(listed))["Subnets"]}
    assert set(listed) == {topo.subnet_id, other}
    assert {k: (s.cidr, s.available, s.tags) for k, s in listed.items()} == {
        k: (s["CidrBlock"], s["AvailableIpAddressCount"],
            {t["Key"]: t["Value"] for t in s.get("Tags", ())}) for k, s in theirs.items()}
    assert listed[other].tags == {"kubernetes.io/role/cni": "1"}
    limits = ec2.instance_limits("m5.large")
    assert (limits.max_enis, limits.ipv4_per_eni) == (3, 10)

    eni = ec2.create_eni(topo.subnet_id, info.security_groups, {"cluster": "t"}, 2)
    assert len(eni.secondary_ips) == 2 and eni.tags == {"cluster": "t"}
    attachment = ec2.attach_eni(eni.eni_id, inst.instance_id, 1)
    got = ec2.assign_ips(eni.eni_id, 2)
    ec2.unassign_ips(eni.eni_id, got[:1])
    prefix = ec2.assign_prefixes(eni.eni_id, 1)

    theirs = boto.describe_network_interfaces(NetworkInterfaceIds=[eni.eni_id])[
        "NetworkInterfaces"][0]
    view = ec2.describe_eni(eni.eni_id)
    assert set(view.ips) == {p["PrivateIpAddress"] for p in theirs["PrivateIpAddresses"]}
    assert view.prefixes == prefix == [p["Ipv4Prefix"] for p in theirs["Ipv4Prefixes"]]
    assert (view.mac, view.attachment_id, view.instance_id, view.device_index) == \
        (theirs["MacAddress"], attachment, inst.instance_id, 1)
    assert {v.eni_id for v in ec2.describe_enis(inst.instance_id)} == \
        {inst.primary_eni_id, eni.eni_id}
    assert [v.eni_id for v in ec2.describe_tagged_enis("cluster", "t")] == [eni.eni_id]

    with pytest.raises(ApiError) as e:
        ec2.unassign_ips(eni.eni_id, ["10.255.255.1"])
    assert e.value.code == "InvalidParameterValue"
    ec2.unassign_prefixes(eni.eni_id, prefix)
    ec2.detach_eni(attachment)
    ec2.delete_eni(eni.eni_id)
    assert ec2.describe_eni(eni.eni_id) is None
    ec2.delete_eni(eni.eni_id)  # already gone: tolerated


class _Scripted(http.server.BaseHTTPRequestHandler):
    answers: list[tuple[int, bytes]] = []
    seen = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        status, body = self.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def _error(code: str) -> bytes:
    return (f"<Response><Errors><Error><Code>{code}</Code><Message>m</Message></Error></Errors>"
            "<RequestID>r</RequestID></Response>").encode()


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(ec2_query.random, "random", lambda: 0.0)  # no backoff wait
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Scripted.seen = 0
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("first", "retried"), [
    ((503, b"unavailable"), True),
    ((400, _error("RequestLimitExceeded")), True),
    ((400, _error("InvalidParameterValue")), False),
])
def test_retries_like_botocore_standard_mode(scripted, first, retried):
    _Scripted.answers = [first, (200, OK)]
    ec2 = QueryEc2(scripted, "us-east-1")
    if retried:
        ec2.detach_eni("eni-attach-1")
        assert _Scripted.seen == 2
    else:
        with pytest.raises(ApiError) as e:
            ec2.detach_eni("eni-attach-1")
        assert (e.value.code, _Scripted.seen) == ("InvalidParameterValue", 1)


def test_gives_up_after_one_retry(scripted):
    _Scripted.answers = [(400, _error("RequestLimitExceeded"))] * 2 + [(200, OK)]
    with pytest.raises(ApiError) as e:
        QueryEc2(scripted, "us-east-1").detach_eni("eni-attach-1")
    assert (e.value.code, _Scripted.seen) == ("RequestLimitExceeded", 2)


def test_unanswered_is_an_api_error():
    with pytest.raises(ApiError) as e:
        QueryEc2("http://127.0.0.1:1", "us-east-1").detach_eni("eni-attach-1")
    assert e.value.code == "ConnectionRefusedError"


def _instance_xml(nics: list[tuple[str, int, str]], primary_ip: str) -> bytes:
    items = "".join(f"<item><networkInterfaceId>{eni}</networkInterfaceId><subnetId>subnet-1"
                    f"</subnetId><privateIpAddress>{ip}</privateIpAddress><attachment>"
                    f"<deviceIndex>{dev}</deviceIndex></attachment></item>"
                    for eni, dev, ip in nics)
    return (f'<R xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><reservationSet><item>'
            f"<instancesSet><item><instanceId>i-1</instanceId><instanceType>m5.large"
            f"</instanceType><privateIpAddress>{primary_ip}</privateIpAddress>"
            f"<networkInterfaceSet>{items}</networkInterfaceSet></item></instancesSet>"
            f"</item></reservationSet></R>").encode()


@pytest.mark.parametrize(("nics", "primary"), [
    ([("eni-a", 0, "10.0.1.50"), ("eni-b", 1, "10.0.1.10")], "eni-b"),  # HyperPod's layout
    ([("eni-a", 0, "10.0.1.10"), ("eni-b", 1, "10.0.1.50")], "eni-a"),
], ids=["at-device-1", "at-device-0"])
def test_the_primary_eni_is_the_one_holding_the_instances_primary_ip(nics, primary, monkeypatch):
    monkeypatch.setattr(QueryEc2, "_once",
                        lambda self, action, body: (200, _instance_xml(nics, "10.0.1.10")))
    info = QueryEc2("http://127.0.0.1:1", "us-east-1").describe_instance("i-1")
    assert (info.primary_eni_id, info.primary_ip) == (primary, "10.0.1.10")
