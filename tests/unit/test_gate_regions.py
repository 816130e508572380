"""The gate serves whatever region a request is signed for, as EC2 and moto do.

Real clients (boto3, the AWS CLI) sign for us-west-2 and eu-west-1 against one gate: each
region has its own VPCs, rules and ownership, the same CIDRs in two regions never meet,
and the fault IMDS follows instances in every region the gate serves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest
import urllib3
from botocore.exceptions import ClientError

from cnikit.cloud import Cloud, OwnershipSnapshot
from cnikit.cloud.cloud import DEFAULT_AMI
from cnikit.errors import UsageError
from fault_imds.server import ImdsServer
from tests.unit.imds_support import Imds
from tests.waiting import wait_for

BIN = Path(sys.executable).parent


def signing_for(cloud, region: str):
    """A plain boto3 client on the gate, signing for `region`."""
    return boto3.client("ec2", endpoint_url=cloud.endpoint, region_name=region,
                        aws_access_key_id="test", aws_secret_access_key="test")


def vpc_in(ec2, cidr: str, subnet: str, az: str) -> str:
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    return ec2.create_subnet(VpcId=vpc, CidrBlock=subnet, AvailabilityZone=az)["Subnet"][
        "SubnetId"]


def launch(ec2, subnet_id: str) -> dict:
    return ec2.run_instances(ImageId=DEFAULT_AMI, MinCount=1, MaxCount=1,
                             InstanceType="m5.large", SubnetId=subnet_id)["Instances"][0]


def primary_eni(inst: dict) -> str:
    return inst["NetworkInterfaces"][0]["NetworkInterfaceId"]


def test_run_instances_in_a_subnet_of_another_region(gate_cloud):
    """The issue's reproduction: before, RunInstances said InvalidSubnetID.NotFound."""
    west = signing_for(gate_cloud, "us-west-2")
    subnet = vpc_in(west, "10.60.0.0/16", "10.60.1.0/24", "us-west-2b")
    inst = launch(west, subnet)
    assert inst["SubnetId"] == subnet
    assert inst["Placement"]["AvailabilityZone"] == "us-west-2b"
    eni = primary_eni(inst)
    assert inst["PrivateIpAddress"] == "10.60.1.4"  # the gate picked it: lowest free host
    # Served per region, as EC2 does: us-east-1 knows nothing of it.
    assert [e["NetworkInterfaceId"] for e in west.describe_network_interfaces(
        Filters=[{"Name": "subnet-id", "Values": [subnet]}])["NetworkInterfaces"]] == [eni]
    with pytest.raises(ClientError) as exc:
        gate_cloud.client().describe_network_interfaces(NetworkInterfaceIds=[eni])
    assert exc.value.response["Error"]["Code"] == "InvalidNetworkInterfaceID.NotFound"
    # Rules hold there too: limits, and the gate decides every address.
    got = west.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                           SecondaryPrivateIpAddressCount=2)
    assert [a["PrivateIpAddress"] for a in got["AssignedPrivateIpAddresses"]] == [
        "10.60.1.5", "10.60.1.6"]
    with pytest.raises(ClientError) as exc:
        west.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=8)
    assert exc.value.response["Error"]["Code"] == "PrivateIpAddressLimitExceeded"
    snap = gate_cloud.gate.owners("us-west-2")
    assert snap.region == "us-west-2"
    assert snap.enis[eni].ips == ["10.60.1.4", "10.60.1.5", "10.60.1.6"]
    assert snap.enis[eni].instance_id == inst["InstanceId"]
    assert eni not in gate_cloud.gate.owners().enis  # the default region's API is unchanged
    assert "us-west-2" in gate_cloud.gate.regions()
    # Terminating there releases the ENI there.
    west.terminate_instances(InstanceIds=[inst["InstanceId"]])
    assert eni not in gate_cloud.gate.owners("us-west-2").enis


def test_same_cidrs_in_two_regions_do_not_collide(gate_cloud):
    east, west = signing_for(gate_cloud, "us-east-1"), gate_cloud.client(region="us-west-2")
    a = launch(east, vpc_in(east, "10.61.0.0/16", "10.61.1.0/24", "us-east-1a"))
    b = launch(west, vpc_in(west, "10.61.0.0/16", "10.61.1.0/24", "us-west-2a"))
    assert a["PrivateIpAddress"] == b["PrivateIpAddress"] == "10.61.1.4"
    ea, eb = primary_eni(a), primary_eni(b)
    for ec2, eni in ((east, ea), (west, eb)):
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=["10.61.1.50"])
    assert gate_cloud.gate.owners().ips["10.61.1.50"].eni_id == ea
    assert gate_cloud.gate.owners("us-west-2").ips["10.61.1.50"].eni_id == eb
    # Within one region the address is still held once.
    other = west.create_network_interface(SubnetId=b["SubnetId"])["NetworkInterface"]
    assert other["PrivateIpAddress"] == "10.61.1.5"
    with pytest.raises(ClientError) as exc:
        west.assign_private_ip_addresses(NetworkInterfaceId=other["NetworkInterfaceId"],
                                         PrivateIpAddresses=["10.61.1.50"])
    assert exc.value.response["Error"]["Code"] == "InvalidParameterValue"
    # Unassigning in one region leaves the other's alone.
    east.unassign_private_ip_addresses(NetworkInterfaceId=ea, PrivateIpAddresses=["10.61.1.50"])
    assert "10.61.1.50" not in gate_cloud.gate.owners().ips
    assert gate_cloud.gate.owners("us-west-2").ips["10.61.1.50"].eni_id == eb


def test_one_version_for_every_region(gate_cloud):
    """owners()/wait_change() keep serving the default region; a change in another region
    wakes them (the IMDS's feed) and the JSON names every region served."""
    gate = gate_cloud.gate
    west = signing_for(gate_cloud, "us-west-2")
    inst = launch(west, vpc_in(west, "10.62.0.0/16", "10.62.1.0/24", "us-west-2a"))
    v = gate.owners().version
    t = threading.Thread(target=west.assign_private_ip_addresses, kwargs={
        "NetworkInterfaceId": primary_eni(inst), "SecondaryPrivateIpAddressCount": 1})
    t.start()
    snap = gate.wait_change(v, 10)
    t.join(10)
    assert snap.version > v and snap.region == "us-east-1"
    assert gate.wait_change(v, 10, region="us-west-2").enis[primary_eni(inst)].ips[1] == \
        "10.62.1.5"
    body = json.loads(urllib3.PoolManager().request(
        "GET", gate_cloud.endpoint + "/_cnikit/owners").data)
    assert body["region"] == "us-east-1" and "us-west-2" in body["regions"]
    assert OwnershipSnapshot.from_json(body) == gate.owners()


def test_audit_records_name_the_region(gate_cloud):
    west = signing_for(gate_cloud, "us-west-2")
    inst = launch(west, vpc_in(west, "10.63.0.0/16", "10.63.1.0/24", "us-west-2a"))
    eni = primary_eni(inst)
    west.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
    rec = [r for r in gate_cloud.gate.audit.records() if r.eni_id == eni][-1]
    assert (rec.action, rec.region) == ("AssignPrivateIpAddresses", "us-west-2")


def test_a_fault_naming_a_region_acts_only_on_calls_signed_for_it(gate_cloud):
    west, east = signing_for(gate_cloud, "us-west-2"), signing_for(gate_cloud, "us-east-1")
    west_eni = primary_eni(launch(west, vpc_in(west, "10.65.0.0/16", "10.65.1.0/24",
                                               "us-west-2a")))
    east_eni = primary_eni(launch(east, vpc_in(east, "10.65.0.0/16", "10.65.1.0/24",
                                               "us-east-1a")))
    faults = gate_cloud.gate.faults
    throttle = faults.add("throttle", target={"action": "DescribeVpcs", "region": "us-west-2"})
    lag = faults.add("describe-lag", target={"region": "us-west-2"}, seconds=60)
    try:
        assert [(f["kind"], f["target"]) for f in faults.list()] == [
            ("throttle", {"action": "DescribeVpcs", "region": "us-west-2"}),
            ("describe-lag", {"region": "us-west-2"})]
        with pytest.raises(ClientError) as exc:
            west.describe_vpcs()
        assert exc.value.response["Error"]["Code"] == "RequestLimitExceeded"
        east.describe_vpcs()  # another region: untouched
        # Describe in us-west-2 answers from a minute ago (before the ENI), us-east-1 now.
        for ec2, eni, seen in ((west, west_eni, []), (east, east_eni, [east_eni])):
            found = ec2.describe_network_interfaces(
                Filters=[{"Name": "network-interface-id", "Values": [eni]}])
            assert [e["NetworkInterfaceId"] for e in found["NetworkInterfaces"]] == seen
    finally:
        faults.remove(throttle)
        faults.remove(lag)
    with pytest.raises(UsageError, match="region must be an AWS region"):
        faults.add("throttle", target={"region": "xx-nowhere-9"})
    assert faults.list() == []


def test_unknown_region_is_refused_and_changes_nothing(gate_cloud):
    before = gate_cloud.gate.regions()
    with pytest.raises(ClientError) as exc:
        signing_for(gate_cloud, "xx-nowhere-9").create_vpc(CidrBlock="10.64.0.0/16")
    err = exc.value.response
    assert err["Error"]["Code"] == "AuthFailure"
    assert "xx-nowhere-9" in err["Error"]["Message"]
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 401
    assert gate_cloud.gate.regions() == before
    with pytest.raises(UsageError, match="unknown AWS region"):
        gate_cloud.gate.owners("xx-nowhere-9")


def aws_cli() -> str:
    found = shutil.which("aws", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip("the AWS CLI is not installed (PyPI `awscli`, in the dev extra): "
                    "pip install awscli")
    return found


@pytest.mark.slow
def test_aws_cli_signing_for_eu_west_1(gate_cloud, tmp_path):
    aws = aws_cli()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}

    def run(*args: str) -> dict:
        r = subprocess.run([aws, "ec2", *args, "--region", "eu-west-1", "--endpoint-url",
                            gate_cloud.endpoint, "--output", "json"], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout) if r.stdout.strip() else {}

    vpc = run("create-vpc", "--cidr-block", "10.60.0.0/16")["Vpc"]["VpcId"]
    subnet = run("create-subnet", "--vpc-id", vpc, "--cidr-block", "10.60.1.0/24",
                 "--availability-zone", "eu-west-1b")["Subnet"]["SubnetId"]
    inst = run("run-instances", "--image-id", DEFAULT_AMI, "--count", "1", "--instance-type",
               "t3.large", "--subnet-id", subnet)["Instances"][0]
    assert inst["Placement"]["AvailabilityZone"] == "eu-west-1b"
    eni = primary_eni(inst)
    got = run("assign-private-ip-addresses", "--network-interface-id", eni,
              "--secondary-private-ip-address-count", "2")
    assert [a["PrivateIpAddress"] for a in got["AssignedPrivateIpAddresses"]] == [
        "10.60.1.5", "10.60.1.6"]
    described = run("describe-network-interfaces", "--network-interface-ids", eni)
    assert sorted(a["PrivateIpAddress"] for a in
                  described["NetworkInterfaces"][0]["PrivateIpAddresses"]) == [
        "10.60.1.4", "10.60.1.5", "10.60.1.6"]
    assert gate_cloud.gate.owners("eu-west-1").ips["10.60.1.6"].eni_id == eni
    assert "10.60.1.6" not in gate_cloud.gate.owners().ips


def test_imds_follows_instances_in_every_region(gate_cloud):
    """The IMDS is started for the kit's region; the gate tells it of the others."""
    west = signing_for(gate_cloud, "us-west-2")
    subnet = vpc_in(west, "10.65.0.0/16", "10.65.1.0/24", "us-west-2c")
    zone_id = west.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["AvailabilityZoneId"]
    with ImdsServer(ec2_endpoint=gate_cloud.endpoint) as imds:
        inst = launch(west, subnet)
        iid = inst["InstanceId"]
        meta = Imds(imds.url, iid)
        assert wait_for(lambda: meta.text("/latest/meta-data/instance-id"), 10,
                        "the us-west-2 instance in IMDS") == iid
        assert meta.text("/latest/meta-data/placement/region") == "us-west-2"
        assert meta.text("/latest/meta-data/placement/availability-zone") == "us-west-2c"
        seen = imds.ec2.latest().instances[iid]
        assert seen["Region"] == "us-west-2"
        assert seen["Placement"]["AvailabilityZone"] == "us-west-2c"
        assert seen["Placement"]["AvailabilityZoneId"] == zone_id
        eni = next(e for e in imds.ec2.latest().enis if e["NetworkInterfaceId"] == primary_eni(inst))
        assert eni["Region"] == "us-west-2"
        assert imds.ec2.latest().subnets[subnet]["Region"] == "us-west-2"
        # and it follows that region's changes
        west.assign_private_ip_addresses(NetworkInterfaceId=primary_eni(inst),
                                         SecondaryPrivateIpAddressCount=1)
        mac = inst["NetworkInterfaces"][0]["MacAddress"]
        wait_for(lambda: meta.lines(f"/latest/meta-data/network/interfaces/macs/{mac}/local-ipv4s")
                 == ["10.65.1.4", "10.65.1.5"], 10, "the new address in IMDS")


def test_the_kits_own_region_is_configurable():
    with pytest.raises(UsageError, match="unknown AWS region"):
        Cloud.start(region="moon-base-1")
    with Cloud.start(region="eu-west-1") as cloud:
        topo = cloud.bootstrap(nodes=1)
        assert topo.az == "eu-west-1a"
        snap = cloud.gate.owners()
        assert snap.region == "eu-west-1" and cloud.gate.regions() == ["eu-west-1"]
        assert snap.enis[topo.instances[0].primary_eni_id].instance_id == \
            topo.instances[0].instance_id
        # a client signing for eu-west-1 sees what the kit made; one for us-east-1 does not
        assert cloud.client().describe_instances(InstanceIds=[topo.instances[0].instance_id])
        with pytest.raises(ClientError):
            cloud.client(region="us-east-1").describe_network_interfaces(
                NetworkInterfaceIds=[topo.instances[0].primary_eni_id])


def test_cnikit_ec2_region_option():
    cnikit = str(BIN / "cnikit")
    bad = subprocess.run([cnikit, "ec2", "--region", "moon-base-1"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2
    assert "unknown AWS region 'moon-base-1'" in bad.stderr
    assert "Traceback" not in bad.stderr and bad.stderr.strip().count("\n") == 0
    proc = subprocess.Popen([cnikit, "ec2", "--port", "0", "--region", "eu-west-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:  # bounded: the process prints a few lines, then waits
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        assert any("AWS_DEFAULT_REGION=eu-west-1" in line for line in lines), lines
    finally:
        proc.terminate()
        # communicate drains both pipes: a child blocked on a full stderr pipe never exits.
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"cnikit ec2 did not stop within 60 s of SIGTERM; stderr: {err[-2000:]}")
    assert proc.returncode == 0, err[-2000:]
