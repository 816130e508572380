"""fault_imds serves what real IMDS serves beyond `latest`: the API version list and every
dated version, the per-interface `network-card`, placement's zone id and region, the signed
identity blobs, scheduled events, and `iam/` for an instance with an instance profile; and
its control API refuses a body that will never arrive at once."""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.parse

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.serialization import pkcs7

from cnikit.cloud import Cloud
from fault_imds.client import FaultClient
from fault_imds.server import ImdsServer
from tests.unit.imds_support import MACS, Imds, give_instance_profile

SEED = 20261201
# What real IMDS lists at `/` (AWS's EC2 user guide, "Get the available versions").
REAL_VERSIONS = (
    "1.0 2007-01-19 2007-03-01 2007-08-29 2007-10-10 2007-12-15 2008-02-01 2008-09-01 "
    "2009-04-04 2011-01-01 2011-05-01 2012-01-12 2014-02-25 2014-11-05 2015-10-20 2016-04-19 "
    "2016-06-30 2016-09-02 2018-03-28 2018-08-17 2018-09-24 2019-10-01 2020-10-27 2021-01-03 "
    "2021-03-23 latest"
).split()


@pytest.fixture(scope="module")
def env():
    cloud = Cloud.start(ec2="moto", seed=SEED)
    topo = cloud.bootstrap(nodes=2)
    arn = give_instance_profile(cloud, topo.instances[0].instance_id)
    server = ImdsServer(ec2_endpoint=cloud.endpoint, instance_id=topo.instances[0].instance_id,
                        seed=SEED).start()
    yield cloud, topo, server, arn
    server.stop()
    cloud.stop()


@pytest.fixture
def fc(env):
    client = FaultClient(env[2].control_url)
    client.clear()
    yield client
    client.clear()


def imds_of(env, n: int = 0) -> Imds:
    return Imds(env[2].url, env[1].instances[n].instance_id)


def test_root_lists_the_api_versions_as_real_imds(env):
    imds = imds_of(env)
    assert imds.lines("/") == REAL_VERSIONS
    for version in REAL_VERSIONS:
        assert imds.lines(f"/{version}/") == ["dynamic", "meta-data"], version
        assert imds.lines(f"/{version}") == ["dynamic", "meta-data"], version


@pytest.mark.parametrize("version", ["2021-03-23", "2018-09-24", "2016-09-02", "2009-04-04",
                                     "1.0"])
def test_every_dated_version_serves_the_latest_tree(env, version):
    cloud, topo, server, _ = env
    inst = topo.instances[0]
    imds = imds_of(env)
    assert imds.text(f"/{version}/meta-data/instance-id") == inst.instance_id
    assert imds.lines(f"/{version}/meta-data/") == imds.lines("/latest/meta-data/")
    mac_dir = f"/{version}/meta-data/network/interfaces/macs/{inst.mac}/local-ipv4s"
    assert imds.lines(mac_dir) == imds.ips(inst.mac)
    doc = f"/{version}/dynamic/instance-identity/document"
    assert json.loads(imds.text(doc))["instanceId"] == inst.instance_id
    # Tokens come from /latest only, and work for every version.
    token = imds.token()
    assert imds.text(f"/{version}/meta-data/instance-id", token) == inst.instance_id


def test_unknown_versions_and_version_token_paths_are_404(env):
    imds = imds_of(env)
    for path in ("/2099-01-01/meta-data/instance-id", "/2021-3-23/meta-data/instance-id",
                 "/latest2/meta-data/", "/meta-data/instance-id"):
        assert imds.get(path)[0] == 404, path


def test_faults_reach_every_version(env, fc):
    """A fault targets what is served, whichever version the client asks it under."""
    inst = env[1].instances[0]
    imds = imds_of(env)
    with fc.error(status=503, mac=inst.mac):
        assert imds.get(f"/2021-03-23/meta-data/network/interfaces/macs/{inst.mac}/mac")[0] == 503
        assert imds.get("/2021-03-23/meta-data/instance-id")[0] == 200
    with fc.error(status=500, path="latest/meta-data/instance-id"):
        assert imds.get("/2016-09-02/meta-data/instance-id")[0] == 500
    with fc.missing(mac=inst.mac):
        assert imds.get(f"/2018-09-24/meta-data/network/interfaces/macs/{inst.mac}/")[0] == 404
    # The request log names the fault in effect, and the path as the client asked it.
    since = fc.requests(since=0)["next"]
    with fc.error(status=503, mac=inst.mac) as fid:
        imds.get(f"/2016-09-02/meta-data/network/interfaces/macs/{inst.mac}/mac")
    logged = fc.requests(since=since, instance_id=inst.instance_id)["requests"]
    assert [(r["path"], r["status"], r["faults"]) for r in logged] == [
        (f"/2016-09-02/meta-data/network/interfaces/macs/{inst.mac}/mac", 503, [fid])]


def test_interface_lists_network_card_as_real_instances(env):
    """The VPC CNI reads `network-card` (GetNetworkCard) when the interface lists it; upstream's
    fixture from a real instance lists `network-card`, never `network-card-index`."""
    inst = env[1].instances[0]
    imds = imds_of(env)
    fields = imds.lines(f"{MACS}{inst.mac}/")
    assert "network-card" in fields and "network-card-index" not in fields
    assert imds.text(f"{MACS}{inst.mac}/network-card") == "0"
    assert imds.get(f"{MACS}{inst.mac}/network-card-index")[0] == 404


def test_placement_zone_id_and_region(env):
    cloud, topo, _, _ = env
    imds = imds_of(env)
    subnet = cloud.client().describe_subnets(SubnetIds=[topo.subnet_id])["Subnets"][0]
    assert "availability-zone-id" in imds.lines("/latest/meta-data/placement/")
    assert imds.text("/latest/meta-data/placement/availability-zone-id") == \
        subnet["AvailabilityZoneId"]
    assert imds.text("/latest/meta-data/placement/region") == "us-east-1"
    assert imds.text("/latest/meta-data/placement/availability-zone") == topo.instances[0].az


def _blob(imds: Imds, name: str) -> bytes:
    body = imds.text(f"/latest/dynamic/instance-identity/{name}")
    assert body is not None, name
    lines = body.split("\n")
    # Base64 in lines of at most 64 characters, without PEM armour, as IMDS sends it.
    assert all(0 < len(line) <= 64 for line in lines) and "-----" not in body, name
    return base64.b64decode(body, validate=False)


def test_identity_pkcs7_rsa2048_and_signature_are_well_formed_and_sign_the_document(env):
    imds = imds_of(env)
    assert imds.lines("/latest/dynamic/instance-identity/") == [
        "document", "pkcs7", "rsa2048", "signature"]
    document = imds.text("/latest/dynamic/instance-identity/document").encode()
    for name in ("pkcs7", "rsa2048"):
        certs = pkcs7.load_der_pkcs7_certificates(_blob(imds, name))
        assert certs and isinstance(certs[0], x509.Certificate)
    cert = pkcs7.load_der_pkcs7_certificates(_blob(imds, "rsa2048"))[0]
    signature = _blob(imds, "signature")
    assert len(signature) == 256
    cert.public_key().verify(signature, document, padding.PKCS1v15(), hashes.SHA256())
    # Each instance's blobs sign its own document.
    other = imds_of(env, 1)
    assert other.text("/latest/dynamic/instance-identity/signature") != \
        imds.text("/latest/dynamic/instance-identity/signature")


def test_scheduled_events_are_an_empty_list(env):
    imds = imds_of(env)
    assert "events/" in imds.lines("/latest/meta-data/")
    assert json.loads(imds.text("/latest/meta-data/events/maintenance/scheduled")) == []
    assert json.loads(imds.text("/latest/meta-data/events/maintenance/history")) == []


def test_iam_info_and_credentials_for_an_instance_with_a_profile(env):
    _, topo, _, arn = env
    imds = imds_of(env)
    assert "iam/" in imds.lines("/latest/meta-data/")
    assert imds.lines("/latest/meta-data/iam/") == ["info", "security-credentials/"]
    info = json.loads(imds.text("/latest/meta-data/iam/info"))
    assert info["Code"] == "Success" and info["InstanceProfileArn"] == arn
    assert info["InstanceProfileId"] and info["LastUpdated"].endswith("Z")
    assert imds.lines("/latest/meta-data/iam/security-credentials/") == ["node-role"]
    creds = json.loads(imds.text("/latest/meta-data/iam/security-credentials/node-role"))
    assert creds["Code"] == "Success" and creds["Type"] == "AWS-HMAC"
    assert creds["AccessKeyId"].startswith("ASIA") and len(creds["AccessKeyId"]) == 20
    assert len(creds["SecretAccessKey"]) == 40 and creds["Token"]
    assert creds["Expiration"] > creds["LastUpdated"]
    # Another instance's credentials differ; an instance without a profile has no iam/.
    other = imds_of(env, 1)
    assert "iam/" not in other.lines("/latest/meta-data/")
    assert other.get("/latest/meta-data/iam/info")[0] == 404


def _raw(url: str, request: bytes, deadline_s: float = 1.0) -> tuple[float, bytes]:
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=deadline_s) as s:
        start = time.monotonic()
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)  # socket.timeout at the deadline fails the test
            if not chunk:
                break
            data += chunk
        return time.monotonic() - start, data


def huge_post(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000000000\r\n\r\n{\"kind\": \"stale\"}").encode()


def test_control_refuses_a_huge_content_length_at_once(env, fc):
    elapsed, data = _raw(env[2].control_url, huge_post("/faults"))
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"413", data
    error = json.loads(body)["error"]
    assert "\n" not in error and "Content-Length" in error
    assert elapsed < 1.0
    assert fc.list() == []


def test_region_and_zone_follow_the_instance():
    """An instance in another region is served that region, its zone and zone id, as the view
    reports them (`Region`, `Placement.AvailabilityZoneId`), not the server's own region."""
    from fault_imds.tree import Ec2State, build_models, render

    inst = {"InstanceId": "i-1", "InstanceType": "m5.large", "State": {"Name": "running"},
            "Region": "us-west-2", "PrivateIpAddress": "10.0.1.4",
            "Placement": {"AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az1"}}
    eni = {"NetworkInterfaceId": "eni-1", "MacAddress": "02:00:00:00:00:01",
           "Attachment": {"InstanceId": "i-1", "DeviceIndex": 0, "Status": "attached"},
           "PrivateIpAddresses": [{"PrivateIpAddress": "10.0.1.4", "Primary": True}],
           "SubnetId": "subnet-1"}
    state = Ec2State(t=0, wall=1e9, instances={"i-1": inst}, enis=(eni,),
                     subnets={"subnet-1": {"SubnetId": "subnet-1", "CidrBlock": "10.0.1.0/24"}},
                     vpcs={}, region="us-east-1")
    leaves = render(build_models(state)["i-1"])
    meta = "latest/meta-data/"
    assert leaves[meta + "placement/region"] == "us-west-2"
    assert leaves[meta + "placement/availability-zone"] == "us-west-2b"
    assert leaves[meta + "placement/availability-zone-id"] == "usw2-az1"
    assert leaves[meta + "local-hostname"] == "ip-10-0-1-4.us-west-2.compute.internal"
    assert json.loads(leaves["latest/dynamic/instance-identity/document"])["region"] == "us-west-2"


def test_control_refuses_a_body_that_stops_arriving(env, fc, monkeypatch):
    from faultcore import wire as fault_api

    monkeypatch.setattr(fault_api, "BODY_TIMEOUT_S", 0.2)
    request = (b"POST /faults HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n"
               b'{"kind": ')
    elapsed, data = _raw(env[2].control_url, request, deadline_s=2.0)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"408", data
    assert "did not arrive" in json.loads(body)["error"] and elapsed < 2.0
    assert fc.list() == []
