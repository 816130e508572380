"""fault_imds against a live EC2 (moto behind the cnikit gate): boto3 on the gate, HTTP on
the IMDS. The acceptance tests of issue 3: follow EC2, stale, missing, lag, error, token,
drop; plus paths and bodies, the control API's refusals and the event log."""

from __future__ import annotations

import http.client
import ipaddress
import json
import time
import urllib.request

import boto3
import pytest
from botocore.exceptions import ClientError

from cnikit.cloud import Cloud
from cnikit.cloud.moto_server import MotoServer
from fault_imds.client import FaultClient, FaultError
from fault_imds.server import ImdsServer
from tests.unit.imds_support import MACS, Imds, eni_ips
from tests.waiting import wait_for

SEED = 20261130


@pytest.fixture(scope="module")
def imds_cloud():
    cloud = Cloud.start(ec2="moto", seed=SEED)
    yield cloud
    cloud.stop()


@pytest.fixture(scope="module")
def topo(imds_cloud):
    return imds_cloud.bootstrap(nodes=3)


@pytest.fixture(scope="module")
def ec2(imds_cloud):
    return imds_cloud.client()


@pytest.fixture(scope="module")
def server(imds_cloud, topo):
    s = ImdsServer(
        ec2_endpoint=imds_cloud.endpoint, instance_id=topo.instances[0].instance_id, seed=SEED
    ).start()
    yield s
    s.stop()


@pytest.fixture
def fc(server):
    client = FaultClient(server.control_url)
    client.clear()
    yield client
    client.clear()


def as_instance(server, topo, n: int) -> Imds:
    return Imds(server.url, topo.instances[n].instance_id)


# -- paths and bodies ---------------------------------------------------------------------------


def test_tree_paths_bodies_and_content_types(server, topo):
    inst = topo.instances[0]
    imds = as_instance(server, topo, 0)
    status, body, ctype = imds.get("/latest/meta-data/")
    assert status == 200 and ctype.startswith("text/plain")
    index = body.split("\n")
    for entry in ("ami-id", "instance-id", "instance-type", "local-ipv4", "local-hostname", "mac",
                  "network/", "placement/", "security-groups"):
        assert entry in index
    assert imds.text("/latest/meta-data/instance-id") == inst.instance_id
    assert imds.text("/latest/meta-data/instance-type") == "m5.large"
    assert imds.text("/latest/meta-data/local-ipv4") == inst.primary_ip
    assert imds.text("/latest/meta-data/mac") == inst.mac
    assert imds.text("/latest/meta-data/placement/availability-zone") == inst.az
    assert imds.text("/latest/meta-data/placement/region") == "us-east-1"
    assert imds.text("/latest/meta-data/local-hostname").startswith("ip-")
    # Directory listings end entries with "/", with or without the trailing slash asked.
    assert inst.mac + "/" in imds.lines(MACS)
    assert imds.lines(MACS.rstrip("/")) == imds.lines(MACS)
    mac_dir = imds.lines(f"{MACS}{inst.mac}/")
    for leaf in ("device-number", "interface-id", "local-ipv4s", "mac", "network-card",
                 "owner-id", "security-group-ids", "subnet-id", "subnet-ipv4-cidr-block",
                 "vpc-id", "vpc-ipv4-cidr-block", "vpc-ipv4-cidr-blocks"):
        assert leaf in mac_dir
    base = f"{MACS}{inst.mac}/"
    assert imds.text(base + "device-number") == "0"
    assert imds.text(base + "network-card") == "0"
    assert imds.text(base + "interface-id") == inst.primary_eni_id
    assert imds.text(base + "mac") == inst.mac
    assert imds.text(base + "subnet-id") == topo.subnet_id
    assert imds.text(base + "subnet-ipv4-cidr-block") == topo.subnet_cidr
    assert imds.text(base + "vpc-id") == topo.vpc_id
    assert imds.text(base + "vpc-ipv4-cidr-block") == topo.vpc_cidr
    assert imds.text(base + "vpc-ipv4-cidr-blocks") == topo.vpc_cidr
    assert imds.text(base + "owner-id") == "123456789012"
    assert imds.text(base + "security-group-ids").startswith("sg-")
    assert imds.lines(base + "local-ipv4s")[0] == inst.primary_ip
    # No prefix yet: 404, as AWS answers.
    assert imds.get(base + "ipv4-prefix")[0] == 404
    # A leaf asked with a trailing slash (botocore's region fetcher does that).
    assert imds.text("/latest/meta-data/placement/availability-zone/") == inst.az
    doc = json.loads(imds.text("/latest/dynamic/instance-identity/document"))
    assert doc["instanceId"] == inst.instance_id
    assert doc["region"] == "us-east-1" and doc["privateIp"] == inst.primary_ip
    assert doc["availabilityZone"] == inst.az and doc["instanceType"] == "m5.large"
    status, body, ctype = imds.get("/latest/meta-data/no-such-thing")
    assert status == 404 and ctype.startswith("text/html") and "404 - Not Found" in body
    assert imds.get(f"{MACS}02:00:00:00:00:00/local-ipv4s")[0] == 404
    # Each instance sees its own tree.
    other = as_instance(server, topo, 1)
    assert other.text("/latest/meta-data/instance-id") == topo.instances[1].instance_id


def test_follows_ec2_within_200ms(server, topo, ec2, fc):
    inst = topo.instances[0]
    imds = as_instance(server, topo, 0)
    before = set(eni_ips(ec2, inst.primary_eni_id))
    res = ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                          SecondaryPrivateIpAddressCount=3)
    t0 = time.monotonic()
    new = {a["PrivateIpAddress"] for a in res["AssignedPrivateIpAddresses"]} - before
    assert len(new) == 3
    wait_for(lambda: new <= set(imds.ips(inst.mac)), 0.2 - (time.monotonic() - t0),
             "3 new IPs in local-ipv4s within 200 ms")
    truth = eni_ips(ec2, inst.primary_eni_id)
    assert imds.ips(inst.mac) == truth
    assert imds.ips(inst.mac)[0] == inst.primary_ip  # primary first
    # Freed IPs disappear as fast.
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                      PrivateIpAddresses=[truth[-1]])
    truth = eni_ips(ec2, inst.primary_eni_id)
    wait_for(lambda: imds.ips(inst.mac) == truth, 0.2, "a freed IP gone within 200 ms")
    # A prefix (the gate shows Ipv4Prefixes in Describe): one /28 per line.
    ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id, Ipv4PrefixCount=1)
    prefixes = wait_for(lambda: imds.lines(f"{MACS}{inst.mac}/ipv4-prefix"), 0.3, "a prefix")
    assert len(prefixes) == 1 and prefixes[0].endswith("/28")
    assert time.monotonic() - t0 < 5


def test_answers_are_never_behind_the_gate_in_this_process(server, topo, ec2, fc):
    """No lag without a lag fault: read at once after each Assign and Unassign, with no wait
    in between, the IMDS already answers the change (it holds its answer until its view has
    read EC2 as of the request's arrival). Following EC2 by polling alone fails this."""
    inst = topo.instances[1]
    imds = as_instance(server, topo, 1)
    for _ in range(10):
        res = ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                              SecondaryPrivateIpAddressCount=1)
        ip = res["AssignedPrivateIpAddresses"][-1]["PrivateIpAddress"]
        assert ip in imds.ips(inst.mac)
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                          PrivateIpAddresses=[ip])
        assert ip not in imds.ips(inst.mac)
    assert imds.ips(inst.mac) == eni_ips(ec2, inst.primary_eni_id)


def test_ec2_api_faults_do_not_reach_the_imds(imds_cloud, server, topo, ec2):
    """The IMDS plays the hypervisor: the gate's throttling and Describe lag are for API
    callers (the daemon), so IMDS still follows EC2 within 200 ms while a Describe made by
    anyone else shows the state of 30 s ago."""
    inst = topo.instances[2]
    imds = as_instance(server, topo, 2)
    gate = imds_cloud.gate
    lag = gate.faults.add("describe-lag", seconds=3.0)
    try:
        # The lagging view must know the ENI already (it is rendered as of 3 s ago).
        def lagging_view():
            try:
                return eni_ips(ec2, inst.primary_eni_id)
            except ClientError:  # InvalidNetworkInterfaceID.NotFound: younger than the lag
                return None

        wait_for(lagging_view, 5, "the ENI to be 3 s old")
        throttle = gate.faults.add("throttle", target={"action": "DescribeNetworkInterfaces"})
        res = ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                              SecondaryPrivateIpAddressCount=2)
        t0 = time.monotonic()
        new = {a["PrivateIpAddress"] for a in res["AssignedPrivateIpAddresses"]}
        wait_for(lambda: new <= set(imds.ips(inst.mac)), 0.2 - (time.monotonic() - t0),
                 "new IPs in IMDS within 200 ms despite the API faults")
        gate.faults.remove(throttle)
        seen = eni_ips(ec2, inst.primary_eni_id)  # an API caller: the lagging view
        assert not new & set(seen)
    finally:
        gate.faults.clear()
    assert new <= set(eni_ips(ec2, inst.primary_eni_id))
    assert lag


def test_follows_plain_moto_by_polling():
    """Without the gate's change feed (plain moto), the 50 ms Describe poll alone: a new IP
    shows up a poll or two later on an idle machine; the deadline is 2 s because ten test
    workers on two cores can hold this process off the CPU for longer than a poll. (moto
    keeps one state per process: the module's other instances are visible here too.)"""
    with MotoServer() as moto:
        ec2 = boto3.client("ec2", endpoint_url=moto.url, region_name="us-east-1",
                           aws_access_key_id="x", aws_secret_access_key="x")
        vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
        inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                 InstanceType="m5.large", SubnetId=subnet)["Instances"][0]
        eni = inst["NetworkInterfaces"][0]
        with ImdsServer(ec2_endpoint=moto.url, instance_id=inst["InstanceId"]) as server:
            imds = Imds(server.url)
            assert imds.text("/latest/meta-data/instance-id") == inst["InstanceId"]
            for _ in range(3):
                before = set(eni_ips(ec2, eni["NetworkInterfaceId"]))
                res = ec2.assign_private_ip_addresses(
                    NetworkInterfaceId=eni["NetworkInterfaceId"], SecondaryPrivateIpAddressCount=1)
                # moto lists every IP of the ENI here, not only the new one.
                new = {a["PrivateIpAddress"] for a in res["AssignedPrivateIpAddresses"]} - before
                assert len(new) == 1
                wait_for(lambda new=new: new <= set(imds.ips(eni["MacAddress"]) or []), 2,
                         "a new IP within 2 s")
            assert imds.ips(eni["MacAddress"]) == eni_ips(ec2, eni["NetworkInterfaceId"])


def test_launched_instance_appears_and_terminated_goes(server, topo, ec2):
    res = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                            InstanceType="t3.large", SubnetId=topo.subnet_id)
    iid = res["Instances"][0]["InstanceId"]
    imds = Imds(server.url, iid)
    # Under the 5 s full refresh (INSTANCE_REFRESH_S): the new instance is described alone as
    # soon as its ENI shows up. 1.5 s timed out once with both cores busy (make test).
    wait_for(lambda: imds.text("/latest/meta-data/instance-id") == iid, 4.0, "a new instance")
    assert imds.text("/latest/meta-data/instance-type") == "t3.large"
    # Through the gate, the termination moves the feed's `world` count and the instances
    # are read again at once; the periodic refresh is then a minute away, far past this.
    ec2.terminate_instances(InstanceIds=[iid])
    wait_for(lambda: imds.get("/latest/meta-data/instance-id")[0] == 404, 7.0,
             "a terminated instance gone")


def test_attached_eni_appears_and_detached_eni_goes(server, topo, ec2, fc):
    inst = topo.instances[2]
    imds = as_instance(server, topo, 2)
    eni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
    mac = eni["MacAddress"]
    att = ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                       InstanceId=inst.instance_id, DeviceIndex=1)
    # Under the 1 s safety poll (FEED_POLL_S): the gate's change feed woke the view.
    wait_for(lambda: mac + "/" in (imds.lines(MACS) or []), 0.9, "attached ENI listed")
    assert imds.text(f"{MACS}{mac}/device-number") == "1"
    assert imds.text(f"{MACS}{mac}/interface-id") == eni["NetworkInterfaceId"]
    ec2.detach_network_interface(AttachmentId=att["AttachmentId"])
    wait_for(lambda: mac + "/" not in (imds.lines(MACS) or []), 0.9, "detached ENI gone")
    assert imds.get(f"{MACS}{mac}/local-ipv4s")[0] == 404


# -- content faults -----------------------------------------------------------------------------


def test_stale_holds_old_list_until_expiry(server, topo, ec2, fc):
    inst = topo.instances[1]
    imds = as_instance(server, topo, 1)
    eni = inst.primary_eni_id
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=3)
    old = eni_ips(ec2, eni)
    wait_for(lambda: imds.ips(inst.mac) == old, 0.5, "3 IPs appear")
    asked = time.monotonic()
    handle = fc.stale(mac=inst.mac, seconds=2)
    expires = handle.fault["expires"]  # wall clock, as the server set it
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[old[1]])
    new = eni_ips(ec2, eni)
    assert new != old
    # Served stays the old list for as long as the fault holds (every answer that came
    # back before the expiry time is checked, however slow the machine is)...
    checked = 0
    while True:
        served = imds.ips(inst.mac)
        if time.time() >= expires - 0.02:
            break
        assert served == old
        checked += 1
        time.sleep(0.05)
    assert checked >= 5
    # ...and becomes the truth once it expires by itself.
    wait_for(lambda: imds.ips(inst.mac) == new, 1.0, "the true list after expiry")
    assert time.monotonic() - asked >= 2.0
    assert handle.id not in [f["id"] for f in fc.list()]
    kinds = [(e["type"], e.get("fault", {}).get("id")) for e in fc.events()]
    assert ("fault_added", handle.id) in kinds and ("fault_expired", handle.id) in kinds


def test_stale_as_context_manager_and_other_macs_unaffected(server, topo, ec2, fc):
    a, b = topo.instances[0], topo.instances[1]
    ia, ib = as_instance(server, topo, 0), as_instance(server, topo, 1)
    with fc.stale(mac=a.mac, seconds=30):
        held = ia.ips(a.mac)
        ec2.assign_private_ip_addresses(NetworkInterfaceId=b.primary_eni_id,
                                        SecondaryPrivateIpAddressCount=1)
        ec2.assign_private_ip_addresses(NetworkInterfaceId=a.primary_eni_id,
                                        SecondaryPrivateIpAddressCount=1)
        truth_b = eni_ips(ec2, b.primary_eni_id)
        wait_for(lambda: ib.ips(b.mac) == truth_b, 0.3, "the other MAC follows EC2")
        assert ia.ips(a.mac) == held
    assert fc.list() == []
    truth_a = eni_ips(ec2, a.primary_eni_id)
    wait_for(lambda: ia.ips(a.mac) == truth_a, 0.3, "held MAC catches up once removed")


def test_missing_one_ip_and_whole_mac(server, topo, ec2, fc):
    inst = topo.instances[2]
    imds = as_instance(server, topo, 2)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                    SecondaryPrivateIpAddressCount=2)
    truth = eni_ips(ec2, inst.primary_eni_id)
    wait_for(lambda: imds.ips(inst.mac) == truth, 0.3, "IPs appear")
    gone = truth[1]
    with fc.missing(eni_id=inst.primary_eni_id, ips=[gone]):
        assert imds.ips(inst.mac) == [ip for ip in truth if ip != gone]
    assert imds.ips(inst.mac) == truth
    with fc.missing(mac=inst.mac):
        assert inst.mac + "/" not in (imds.lines(MACS) or [])
        assert imds.get(f"{MACS}{inst.mac}/local-ipv4s")[0] == 404
        # Only that instance's tree is touched.
        assert imds.text("/latest/meta-data/instance-id") == inst.instance_id
    assert inst.mac + "/" in imds.lines(MACS)


def test_lag_shows_changes_one_second_late(server, topo, ec2, fc):
    inst = topo.instances[2]
    imds = as_instance(server, topo, 2)
    before = eni_ips(ec2, inst.primary_eni_id)
    wait_for(lambda: imds.ips(inst.mac) == before, 0.3, "served equals EC2")
    fc.lag(seconds=1.0, mac=inst.mac)
    # What changed in the last second shows up late as well: let it settle first.
    wait_for(lambda: imds.ips(inst.mac) == before, 1.5, "lagged view equals EC2")
    sent = time.monotonic()  # EC2 cannot change before this
    ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                    SecondaryPrivateIpAddressCount=1)
    changed = time.monotonic()
    after = eni_ips(ec2, inst.primary_eni_id)
    while True:
        served = imds.ips(inst.mac)
        if time.monotonic() - sent >= 0.95:
            break
        assert served == before
        time.sleep(0.03)
    try:
        wait_for(lambda: imds.ips(inst.mac) == after, 1.0, "the change, one second late")
    except AssertionError:
        hist = server.ec2._history
        raise AssertionError(
            f"served {imds.ips(inst.mac)} != {after}; now-sent {time.monotonic() - sent:.3f}; "
            f"faults {fc.list()}; last events {fc.events()[-4:]}; snapshots "
            f"{[(round(h.t - sent, 3), len(h.instances)) for h in hist[-4:]]}; "
            f"ec2 {server.ec2.last_error}; engine recomputes {server.engine.recomputes}"
        ) from None
    assert time.monotonic() - changed < 1.6


def test_stale_of_ips_and_path_glob(server, topo, ec2, fc):
    inst = topo.instances[0]
    imds = as_instance(server, topo, 0)
    if len(eni_ips(ec2, inst.primary_eni_id)) < 2:  # alone in its worker: no secondary yet
        ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                        SecondaryPrivateIpAddressCount=1)
    before = eni_ips(ec2, inst.primary_eni_id)
    wait_for(lambda: imds.ips(inst.mac) == before, 0.3, "served equals EC2")
    victim = before[-1]  # a secondary: EC2 refuses to unassign the primary
    with fc.stale(ips=[victim]), fc.stale(path="latest/meta-data/network/*/ipv4-prefix"):
        held_prefix = imds.text(f"{MACS}{inst.mac}/ipv4-prefix")
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                          PrivateIpAddresses=[victim])
        fresh = str(ipaddress.ip_network(topo.subnet_cidr)[200])
        ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                        PrivateIpAddresses=[fresh])
        ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id, Ipv4PrefixCount=1)
        truth = eni_ips(ec2, inst.primary_eni_id)
        assert victim not in truth and fresh in truth
        expected = truth + [victim]
        # The freed IP stays listed, new IPs show up; the prefix list holds.
        wait_for(lambda: sorted(imds.ips(inst.mac)) == sorted(expected), 0.3, "held IP + new")
        assert imds.text(f"{MACS}{inst.mac}/ipv4-prefix") == held_prefix
    wait_for(lambda: imds.ips(inst.mac) == truth, 0.3, "the truth after removal")


# -- request faults -----------------------------------------------------------------------------


def test_error_always(server, topo, fc):
    imds = as_instance(server, topo, 0)
    with fc.error(path="*/instance-id"):
        status, body, _ = imds.get("/latest/meta-data/instance-id")
        assert status == 500 and "500 - Internal Server Error" in body
        assert imds.get("/latest/meta-data/instance-type")[0] == 200
    with fc.error(status=503, instance_id=topo.instances[0].instance_id):
        assert imds.get("/latest/meta-data/instance-type")[0] == 503
        assert as_instance(server, topo, 1).get("/latest/meta-data/instance-type")[0] == 200
    assert imds.get("/latest/meta-data/instance-id")[0] == 200


def _pattern(imds_cloud, topo, seed: int, n: int = 40) -> list[int]:
    with ImdsServer(ec2_endpoint=imds_cloud.endpoint, seed=seed,
                    instance_id=topo.instances[0].instance_id) as s:
        FaultClient(s.control_url).error(probability=0.5)
        imds = Imds(s.url)
        return [imds.get("/latest/meta-data/instance-id")[0] for _ in range(n)]


def test_error_half_the_time_is_seeded(imds_cloud, topo):
    print(f"seed {SEED}")
    first = _pattern(imds_cloud, topo, SEED)
    again = _pattern(imds_cloud, topo, SEED)
    other = _pattern(imds_cloud, topo, SEED + 1)
    assert first == again  # same seed, same answers
    assert first != other
    assert set(first) == {200, 500}
    assert 10 <= first.count(500) <= 30


def test_latency(server, topo, fc):
    imds = as_instance(server, topo, 0)
    with fc.latency(ms=300, path="*/instance-type"):
        t = time.monotonic()
        assert imds.get("/latest/meta-data/instance-type")[0] == 200
        assert time.monotonic() - t >= 0.29
        t = time.monotonic()
        imds.get("/latest/meta-data/instance-id")
        assert time.monotonic() - t < 0.2


def test_drop_closes_without_answer(server, topo, fc):
    imds = as_instance(server, topo, 0)
    with fc.drop(path="*/local-ipv4"):
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            imds.get("/latest/meta-data/local-ipv4")
        assert imds.get("/latest/meta-data/instance-id")[0] == 200
    assert imds.get("/latest/meta-data/local-ipv4")[0] == 200


def test_token_v2_ttl_rules_and_expiry(server, topo):
    imds = as_instance(server, topo, 0)
    for bad in (None, "0", "21601", "abc", "-5"):
        headers = {} if bad is None else {"X-aws-ec2-metadata-token-ttl-seconds": bad}
        status, body, ctype = imds.request("PUT", "/latest/api/token", headers)
        # Real IMDS's page, with the name AWS's documentation gives this refusal.
        assert (status, ctype) == (400, "text/html"), bad
        assert "<title>400 - Missing or Invalid Parameters</title>" in body, body
    status, body, _ = imds.request("PUT", "/latest/api/token",
                                   {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
    assert status == 200 and body
    token = imds.token(ttl=1)
    assert imds.get("/latest/meta-data/instance-id", token)[0] == 200
    status, body, ctype = imds.get("/latest/meta-data/instance-id", "not-a-token")
    assert (status, ctype) == (401, "text/html") and "<title>401 - Unauthorized</title>" in body
    # A token is bound to the instance that asked for it; the host, the only one that can
    # use it with another, is told so in one line (still the 401 clients act on).
    other = topo.instances[1].instance_id
    status, body, ctype = as_instance(server, topo, 1).get("/latest/meta-data/instance-id", token)
    assert status == 401 and ctype.startswith("text/plain") and body.count("\n") == 1, body
    assert f"issued to {topo.instances[0].instance_id}" in body and f"?instance={other}" in body
    wait_for(lambda: imds.get("/latest/meta-data/instance-id", token)[0] == 401, 2.5,
             "a 1 s token to expire")
    # IMDSv1 is allowed on this server.
    assert imds.get("/latest/meta-data/instance-id")[0] == 200


def test_require_v2(imds_cloud, topo):
    with ImdsServer(ec2_endpoint=imds_cloud.endpoint, require_v2=True,
                    instance_id=topo.instances[0].instance_id) as s:
        imds = Imds(s.url)
        assert imds.get("/latest/meta-data/instance-id")[0] == 401
        assert imds.get("/latest/meta-data/instance-id", imds.token())[0] == 200


def test_the_host_names_an_instance_or_gets_a_400_that_says_how(imds_cloud, topo):
    """From the host (loopback) with several instances served and none named: a plain-text
    400 naming the header, the query parameter and the instances, not a 404 page; naming
    one by either answers as that instance. A real client: urllib."""
    import urllib.error

    from fault_imds.handler import INSTANCE_HEADER

    def get(url, headers=None):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                        timeout=10) as r:
                return r.status, r.headers.get_content_type(), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get_content_type(), e.read().decode()

    ids = [i.instance_id for i in topo.instances]
    with ImdsServer(ec2_endpoint=imds_cloud.endpoint) as s:
        for iid in ids:
            wait_for(lambda iid=iid: Imds(s.url, iid).text("/latest/meta-data/instance-id")
                     == iid, 10, f"the IMDS to serve {iid}")
        status, ctype, body = get(s.url + "/latest/meta-data/")
        assert (status, ctype) == (400, "text/plain"), body
        assert body.count("\n") == 1 and INSTANCE_HEADER in body and "?instance=" in body
        assert all(iid in body for iid in ids), body
        # A token needs an instance to be bound to: the same answer.
        assert Imds(s.url).request("PUT", "/latest/api/token",
                                   {"X-aws-ec2-metadata-token-ttl-seconds": "60"})[0] == 400
        for iid in ids:
            assert get(f"{s.url}/latest/meta-data/instance-id?instance={iid}") == (
                200, "text/plain", iid)
            assert get(s.url + "/latest/meta-data/instance-id", {INSTANCE_HEADER: iid}) == (
                200, "text/plain", iid)
        status, _, body = get(f"{s.url}/latest/meta-data/instance-id?instance={ids[1]}",
                              {INSTANCE_HEADER: ids[0]})
        assert status == 400 and ids[0] in body and ids[1] in body
        # The request log keeps the refused request, attributed to no instance.
        log = FaultClient(s.control_url).requests()["requests"]
        assert (log[-1]["status"], log[-1]["instance_id"]) == (400, None)


def test_token_fault_reject_and_expire(server, topo, fc):
    imds = as_instance(server, topo, 0)
    token = imds.token()
    with fc.token(mode="reject"):
        assert imds.get("/latest/meta-data/instance-id", token)[0] == 401
        assert imds.get("/latest/meta-data/instance-id")[0] == 200  # v1 untouched
    assert imds.get("/latest/meta-data/instance-id", token)[0] == 200
    with fc.token(mode="expire"):
        assert imds.get("/latest/meta-data/instance-id", token)[0] == 401
    assert imds.get("/latest/meta-data/instance-id", token)[0] == 401  # expired for good
    assert imds.get("/latest/meta-data/instance-id", imds.token())[0] == 200


# -- control API --------------------------------------------------------------------------------


BAD_SPECS = [
    ({"kind": "nope"}, "unknown fault kind"),
    ({"kind": "stale", "duration": -1}, "duration"),
    ({"kind": "stale", "duration": 0}, "duration"),
    ({"kind": "stale", "target": {"mac": "02:00:00:00:00:00"}}, "unknown target mac"),
    ({"kind": "stale", "target": {"instance_id": "i-00000000"}}, "unknown target instance_id"),
    ({"kind": "stale", "target": {"eni_id": "eni-0000"}}, "unknown target eni_id"),
    ({"kind": "stale", "target": {"colour": "red"}}, "unknown target field"),
    ({"kind": "stale", "target": {"ips": ["10.0.1.300"]}}, "not an IP address or prefix"),
    ({"kind": "stale", "wobble": 1}, "unknown field"),
    ({"kind": "stale", "probability": 0.5}, "probability does not apply"),
    ({"kind": "lag", "seconds": 1, "probability": 2}, "probability must be <= 1"),
    ({"kind": "error", "probability": 1.5}, "probability"),
    ({"kind": "error", "probability": -0.1}, "probability"),
    ({"kind": "error", "status": 200}, "status"),
    ({"kind": "error", "target": {"ips": ["10.0.1.4"]}}, "does not apply"),
    ({"kind": "lag"}, "needs 'seconds'"),
    ({"kind": "lag", "seconds": -1}, "seconds"),
    ({"kind": "latency", "ms": "fast"}, "ms must be a number"),
    ({"kind": "token", "mode": "maybe"}, "mode"),
    (["kind", "stale"], "JSON object"),
]


@pytest.mark.parametrize("spec,reason", BAD_SPECS)
def test_bad_specs_get_400_and_change_nothing(server, fc, spec, reason):
    before_events = fc.events()
    req = urllib.request.Request(server.control_url + "/faults", data=json.dumps(spec).encode(),
                                 method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 400
    error = json.loads(exc.value.read())["error"]
    assert reason in error and "\n" not in error
    assert fc.list() == []
    assert fc.events() == before_events


def test_an_interface_deleted_a_moment_before_is_unknown_and_said_to_have_left(
        server, topo, ec2, fc):
    """Targets are judged against EC2 as of the request (the fence): an interface created
    a moment before is known, one deleted a moment before is not, and the refusal says it
    left EC2 (a caller tells that from a bad spec)."""
    from fault_imds.client import UnknownTarget

    eni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
    eni_id, mac = eni["NetworkInterfaceId"], eni["MacAddress"]
    fc.remove(fc.stale(mac=mac))  # at once, no wait for a poll
    ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    deleted = time.time()
    for target in ({"mac": mac}, {"eni_id": eni_id}):
        with pytest.raises(UnknownTarget) as exc:
            fc.add("stale", target=target)
        assert exc.value.target == target
        assert exc.value.departed["eni_id"] == eni_id and exc.value.departed["mac"] == mac
        assert exc.value.departed["since"] <= time.time()
        assert abs(exc.value.departed["since"] - deleted) < 5
        assert f"{eni_id} (mac {mac}) is no longer in EC2" in str(exc.value)
    with pytest.raises(UnknownTarget) as exc:  # never in EC2: unknown, not departed
        fc.add("stale", target={"mac": "02:00:00:00:00:00"})
    assert exc.value.departed is None and fc.list() == []


def test_not_json_and_unknown_fault_id(server, fc):
    req = urllib.request.Request(server.control_url + "/faults", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 400 and "not JSON" in json.loads(exc.value.read())["error"]
    assert fc.remove("f999999") is False
    with pytest.raises(FaultError, match="unknown fault kind"):
        fc.add("nope")


def test_events_record_faults_and_served_changes_in_order(server, topo, ec2, fc):
    inst = topo.instances[1]
    imds = as_instance(server, topo, 1)
    since = max([e["seq"] for e in fc.events()], default=0)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                    SecondaryPrivateIpAddressCount=1)
    truth = eni_ips(ec2, inst.primary_eni_id)
    wait_for(lambda: imds.ips(inst.mac) == truth, 0.3, "new IP served")
    h = fc.missing(mac=inst.mac)
    h.remove()
    events = fc.events(since)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    times = [e["time"] for e in events]
    assert times == sorted(times)
    mine = [e for e in events if e.get("instance_id") == inst.instance_id or "fault" in e]
    summary = [(e["type"], e.get("entry"), e.get("present")) for e in mine]
    assert summary == [
        ("served", "local-ipv4s", True),       # EC2 change
        ("fault_added", None, None),
        ("served", "local-ipv4s", False),      # the MAC left out
        ("fault_removed", None, None),
        ("served", "local-ipv4s", True),       # back
    ], summary
    assert mine[0]["values"] == truth and mine[0]["mac"] == inst.mac
    assert mine[0]["eni_id"] == inst.primary_eni_id


def test_add_listener_serves_a_prebound_socket(server, topo):
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server.add_listener(sock)
    extra = Imds(f"http://127.0.0.1:{port}", topo.instances[2].instance_id)
    assert extra.text("/latest/meta-data/instance-id") == topo.instances[2].instance_id


def test_events_long_poll_and_kinds(server, topo, fc):
    import threading

    last = max([e["seq"] for e in fc.events()], default=0)
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(fc.events(since=last, wait=10)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.1)  # let the long poll reach the server (not a synchronisation: either way works)
    fid = fc.error(path="*/ami-id")
    waiter.join(10)
    assert time.monotonic() - started < 5
    assert got and got[0]["type"] == "fault_added" and got[0]["fault"]["id"] == fid
    # Nothing new: the long poll answers empty after its wait.
    t = time.monotonic()
    assert fc.events(since=got[-1]["seq"], wait=0.3) == []
    assert 0.25 <= time.monotonic() - t < 3
    kinds = fc.kinds()
    # The control API lists every registered kind (one file each in fault_imds/faults/).
    from fault_imds.faults import KINDS

    assert set(kinds) == set(KINDS.describe())
    assert {"stale", "missing", "lag", "error", "latency", "token", "drop",
            "stale-until-change"} <= set(kinds)
    assert "probability" in kinds["error"]["attributes"]
    assert fc.list()[0]["target"] == {"path": "*/ami-id"}
