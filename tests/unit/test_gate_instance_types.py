"""DescribeInstanceTypes through the gate: answered from the limits the gate enforces (the
kit's table, cnikit/cloud/instance_types.json), read by botocore's parser and the AWS CLI,
filtered and paged as EC2 does; a type outside the table is the upstream's, an unknown one
EC2's InvalidInstanceType. Per-card attach limits follow the same records."""

from __future__ import annotations

import pytest

from cnikit.cloud.limits import FALLBACK
from tests.unit.ec2_support import aws_ec2, refused


def network(ec2, name: str) -> dict:
    return ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]["NetworkInfo"]


@pytest.mark.parametrize("name", ["m5.large", "p5.48xlarge", "c6in.32xlarge", "m1.small"])
def test_a_type_is_described_from_the_table(gate_cloud, name):
    net, t = network(gate_cloud.client(), name), FALLBACK[name]
    assert (net["MaximumNetworkInterfaces"], net["Ipv4AddressesPerInterface"],
            net["Ipv6AddressesPerInterface"]) == (t.max_enis, t.ipv4_per_eni, t.ipv6_per_eni)
    assert net["Ipv6Supported"] == (t.ipv6_per_eni > 0)
    assert net["MaximumNetworkCards"] == len(t.card_limits) and net["DefaultNetworkCardIndex"] == 0
    assert [(c["NetworkCardIndex"], c["MaximumNetworkInterfaces"]) for c in net["NetworkCards"]] \
        == list(enumerate(t.card_limits))
    assert net["EfaSupported"] == (t.efa > 0)
    assert net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) == t.efa
    assert net["EncryptionInTransitSupported"] == t.encryption_in_transit


def test_the_answer_is_the_gates_not_the_upstreams(gate_cloud):
    # moto's own answer for p5.48xlarge agrees in figures; the gate's proves itself by what
    # moto adds and the gate leaves out.
    raw = gate_cloud.client(endpoint=gate_cloud.upstream_url)
    assert "VCpuInfo" in raw.describe_instance_types(InstanceTypes=["p5.48xlarge"])[
        "InstanceTypes"][0]
    gate = gate_cloud.client().describe_instance_types(InstanceTypes=["p5.48xlarge"])
    assert "VCpuInfo" not in gate["InstanceTypes"][0]


def test_a_type_outside_the_table_is_the_upstreams_and_launches(gate_cloud, gate_new_vpc):
    assert "m6a.large" not in FALLBACK
    net = network(gate_cloud.client(), "m6a.large")
    assert (net["MaximumNetworkInterfaces"], net["Ipv4AddressesPerInterface"]) == (3, 10)
    topo = gate_new_vpc(gate_cloud, nodes=1, instance_type="m6a.large")
    assert topo.instances[0].instance_type == "m6a.large"


def test_an_unknown_type_is_refused_as_ec2_refuses_it(gate_cloud):
    ec2 = gate_cloud.client()
    message = refused(lambda: ec2.describe_instance_types(InstanceTypes=["m5.large", "m5.huge"]),
                      "InvalidInstanceType")
    assert "m5.huge" in message and "m5.large" not in message
    refused(lambda: ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                      InstanceType="m5.huge"), "InvalidParameterValue")


def test_filters_and_pages(gate_cloud):
    ec2 = gate_cloud.client()
    seen, token = [], None
    while True:
        page = ec2.describe_instance_types(MaxResults=5, **({"NextToken": token} if token else {}))
        assert len(page["InstanceTypes"]) <= 5
        seen += [t["InstanceType"] for t in page["InstanceTypes"]]
        token = page.get("NextToken")
        if not token:
            break
    assert sorted(seen) == sorted(FALLBACK)
    several = ec2.describe_instance_types(Filters=[
        {"Name": "network-info.efa-supported", "Values": ["true"]},
        {"Name": "instance-type", "Values": ["p*", "trn1.*"]}])["InstanceTypes"]
    assert {t["InstanceType"] for t in several} == {
        n for n, t in FALLBACK.items() if t.efa and n.startswith(("p", "trn1."))}
    assert {"p5.48xlarge", "trn1.32xlarge"} <= {t["InstanceType"] for t in several}
    refused(lambda: ec2.describe_instance_types(MaxResults=101), "InvalidParameterValue")
    refused(lambda: ec2.describe_instance_types(Filters=[{"Name": "no-such", "Values": ["x"]}]),
            "InvalidParameterValue")


def test_the_aws_cli_reads_it(gate_cloud, tmp_path):
    run = aws_ec2(gate_cloud.endpoint, gate_cloud.region, tmp_path)
    out = run("describe-instance-types", "--instance-types", "trn1.32xlarge")
    net = out["InstanceTypes"][0]["NetworkInfo"]
    assert net["MaximumNetworkInterfaces"] == 40 and len(net["NetworkCards"]) == 8
    assert net["EfaInfo"]["MaximumEfaInterfaces"] == 8


def test_attach_keeps_each_network_cards_limit(gate_cloud, gate_new_vpc):
    ec2 = gate_cloud.client()
    topo = gate_new_vpc(gate_cloud, nodes=1, instance_type="p5.48xlarge")
    iid = topo.instances[0].instance_id

    def attach(device: int, card: int | None = None):
        eni = ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]
        extra = {} if card is None else {"NetworkCardIndex": card}
        ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                     InstanceId=iid, DeviceIndex=device, **extra)
        return eni["NetworkInterfaceId"]

    attach(1)  # card 0 (the default) now holds its two
    assert "exceeds the limit" in refused(lambda: attach(2), "AttachmentLimitExceeded")
    on_card_1 = attach(1, card=1)  # device 1 again, on another card: another slot
    attach(0, card=1)
    refused(lambda: attach(2, card=1), "AttachmentLimitExceeded")
    assert "NetworkCardIndex" in refused(lambda: attach(1, card=32), "InvalidParameterValue")
    gate_cloud.gate.resync()  # moto shows every ENI on card 0: the gate's card stands
    shown = ec2.describe_network_interfaces(NetworkInterfaceIds=[on_card_1])
    assert shown["NetworkInterfaces"][0]["Attachment"]["NetworkCardIndex"] == 1
    attach(1, card=31)  # the last card
    single = gate_new_vpc(gate_cloud, nodes=1)  # an m5.large has card 0 alone
    eni = ec2.create_network_interface(SubnetId=single.subnet_id)["NetworkInterface"]
    refused(lambda: ec2.attach_network_interface(
        NetworkInterfaceId=eni["NetworkInterfaceId"], DeviceIndex=1, NetworkCardIndex=1,
        InstanceId=single.instances[0].instance_id), "InvalidParameterValue")
