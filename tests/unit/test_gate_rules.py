"""The EC2 gate enforces real EC2's rules: plain boto3 against the gate, for each upstream.

Every refusal is checked for EC2's exact error code and HTTP status, and for leaving the
state unchanged (the gate's ownership and the upstream's own answer).
"""

from __future__ import annotations

import ipaddress
import threading
import time

from tests.unit.ec2_support import refused


def eni_ips(ec2, eni_id: str) -> list[str]:
    eni = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    return [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"]]


def upstream_ips(cloud, eni_id: str) -> list[str]:
    """What the upstream itself holds (straight to moto/LocalStack, not through the gate)."""
    raw = cloud.client(endpoint=cloud.upstream_url)
    eni = raw.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    return sorted(a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"])


def host(topo, n: int) -> str:
    return str(ipaddress.ip_network(topo.subnet_cidr)[n])


def new_eni(ec2, topo, **kw) -> str:
    return ec2.create_network_interface(SubnetId=topo.subnet_id, **kw)["NetworkInterface"][
        "NetworkInterfaceId"]


def test_duplicate_assignment_refused(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    a, b = (i.primary_eni_id for i in topo.instances)
    ip = host(topo, 50)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=[ip])
    before = cloud.gate.owners()
    msg = refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=b,
                                                          PrivateIpAddresses=[ip]),
                  "InvalidParameterValue")
    assert "in use" in msg
    assert ip not in eni_ips(ec2, b)
    assert ip not in upstream_ips(cloud, b)
    assert cloud.gate.owners().version == before.version
    assert cloud.gate.owners().ips[ip].eni_id == a
    # the same ENI again is refused too, and a primary IP is never taken
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=[ip]),
            "InvalidParameterValue")
    primary_b = topo.instances[1].primary_ip
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=a, AllowReassignment=True,
                                                    PrivateIpAddresses=[primary_b]),
            "InvalidParameterValue")


def test_reassignment_honoured(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    a, b = (i.primary_eni_id for i in topo.instances)
    ip = host(topo, 60)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=a, PrivateIpAddresses=[ip])
    ec2.assign_private_ip_addresses(NetworkInterfaceId=b, PrivateIpAddresses=[ip],
                                    AllowReassignment=True)
    assert ip in eni_ips(ec2, b) and ip not in eni_ips(ec2, a)
    assert ip in upstream_ips(cloud, b) and ip not in upstream_ips(cloud, a)
    owner = cloud.gate.owners().ips[ip]
    assert (owner.eni_id, owner.instance_id, owner.primary) == (b, topo.instances[1].instance_id,
                                                                False)


def test_addresses_stay_in_subnet_and_off_reserved(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    net = ipaddress.ip_network(topo.subnet_cidr)
    outside = str(ipaddress.ip_network(topo.vpc_cidr)[5 * 256 + 7])
    for ip in [outside, str(net[0]), str(net[1]), str(net[2]), str(net[3]), str(net[-1])]:
        refused(lambda ip=ip: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                              PrivateIpAddresses=[ip]),
                "InvalidParameterValue")
        refused(lambda ip=ip: new_eni(ec2, topo, PrivateIpAddress=ip), "InvalidParameterValue")
    assert eni_ips(ec2, eni) == [topo.instances[0].primary_ip]


def test_count_assignment_picks_free_addresses_the_gate_chose(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    a, b = (i.primary_eni_id for i in topo.instances)
    results: dict[str, list[str]] = {}

    def grab(eni):
        r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=9)
        results[eni] = [x["PrivateIpAddress"] for x in r["AssignedPrivateIpAddresses"]]

    threads = [threading.Thread(target=grab, args=(e,)) for e in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results[a]) == len(results[b]) == 9
    assert not set(results[a]) & set(results[b])
    net = ipaddress.ip_network(topo.subnet_cidr)
    reserved = {str(net[n]) for n in range(4)} | {str(net[-1])}
    assert not (set(results[a]) | set(results[b])) & reserved
    assert upstream_ips(cloud, a) == sorted(eni_ips(ec2, a))
    assert upstream_ips(cloud, b) == sorted(eni_ips(ec2, b))


def test_per_eni_limit_counts_ips_and_prefixes(gate_vpc):
    cloud, topo = gate_vpc  # m5.large: 10 IPv4 addresses per ENI
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=8)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1)  # slot 10
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                    SecondaryPrivateIpAddressCount=1),
            "PrivateIpAddressLimitExceeded")
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1),
            "PrivateIpAddressLimitExceeded")
    assert len(eni_ips(ec2, eni)) == 9


def test_per_instance_eni_limit_and_unique_device_index(gate_vpc):
    cloud, topo = gate_vpc  # m5.large: 3 ENIs
    ec2 = cloud.client()
    iid = topo.instances[0].instance_id
    e1, e2, e3 = (new_eni(ec2, topo) for _ in range(3))
    ec2.attach_network_interface(NetworkInterfaceId=e1, InstanceId=iid, DeviceIndex=1)
    refused(lambda: ec2.attach_network_interface(NetworkInterfaceId=e2, InstanceId=iid,
                                                 DeviceIndex=1), "InvalidParameterValue")
    ec2.attach_network_interface(NetworkInterfaceId=e2, InstanceId=iid, DeviceIndex=2)
    refused(lambda: ec2.attach_network_interface(NetworkInterfaceId=e3, InstanceId=iid,
                                                 DeviceIndex=3), "AttachmentLimitExceeded")
    refused(lambda: ec2.attach_network_interface(NetworkInterfaceId=e1, InstanceId=topo.instances[1].instance_id,
                                                 DeviceIndex=1), "InvalidNetworkInterface.InUse")
    attached = ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [iid]}])["NetworkInterfaces"]
    assert sorted(e["Attachment"]["DeviceIndex"] for e in attached) == [0, 1, 2]
    owners = cloud.gate.owners()
    assert owners.enis[e2].device_index == 2 and owners.enis[e2].instance_id == iid
    assert owners.enis[e3].instance_id is None


def test_small_subnet_filled_to_last_address_then_refused_at_once(gate_upstream_cloud,
                                                                   gate_new_vpc):
    cloud = gate_upstream_cloud
    topo = gate_new_vpc(cloud, nodes=0, subnet_prefix=28)  # 16 addresses, 11 usable
    ec2 = cloud.client()
    eni = new_eni(ec2, topo)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=9)
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=1)
    net = ipaddress.ip_network(topo.subnet_cidr)
    assert r["AssignedPrivateIpAddresses"][0]["PrivateIpAddress"] == str(net[14])
    assert sorted(eni_ips(ec2, eni), key=ipaddress.ip_address) == [str(net[n]) for n in range(4, 15)]
    started = time.monotonic()
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                    SecondaryPrivateIpAddressCount=1),
            "InsufficientFreeAddressesInSubnet")
    refused(lambda: new_eni(ec2, topo), "InsufficientFreeAddressesInSubnet")
    refused(lambda: ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                      InstanceType="m5.large", SubnetId=topo.subnet_id),
            "InsufficientFreeAddressesInSubnet")
    assert time.monotonic() - started < 5
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1),
            "InsufficientCidrBlocks")


def test_delete_attached_eni_refused_and_terminate_cleans_up(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    inst = topo.instances[0]
    keep = new_eni(ec2, topo)
    att = ec2.attach_network_interface(NetworkInterfaceId=keep, InstanceId=inst.instance_id,
                                       DeviceIndex=1)["AttachmentId"]
    refused(lambda: ec2.delete_network_interface(NetworkInterfaceId=keep),
            "InvalidParameterValue")
    refused(lambda: ec2.delete_network_interface(NetworkInterfaceId=inst.primary_eni_id),
            "InvalidParameterValue")
    ec2.modify_network_interface_attribute(
        NetworkInterfaceId=keep, Attachment={"AttachmentId": att, "DeleteOnTermination": False})
    ec2.terminate_instances(InstanceIds=[inst.instance_id])
    refused(lambda: ec2.describe_network_interfaces(NetworkInterfaceIds=[inst.primary_eni_id]),
            "InvalidNetworkInterfaceID.NotFound")
    left = ec2.describe_network_interfaces(NetworkInterfaceIds=[keep])["NetworkInterfaces"][0]
    assert left["Status"] == "available" and "Attachment" not in left
    owners = cloud.gate.owners()
    assert inst.primary_ip not in owners.ips
    assert owners.enis[keep].instance_id is None
    ec2.delete_network_interface(NetworkInterfaceId=keep)
    assert keep not in cloud.gate.owners().enis


def test_prefix_delegation(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    net = ipaddress.ip_network(topo.subnet_cidr)
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=2)
    got = [p["Ipv4Prefix"] for p in r["AssignedIpv4Prefixes"]]
    assert len(got) == 2
    for p in got:
        block = ipaddress.ip_network(p)  # strict: raises when not aligned
        assert block.prefixlen == 28 and block.subnet_of(net)
        assert net[3] not in block and net[-1] not in block
    shown = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
    assert sorted(p["Ipv4Prefix"] for p in shown["Ipv4Prefixes"]) == sorted(got)
    assert set(cloud.gate.owners().enis[eni].prefixes) == set(got)
    assert {cloud.gate.owners().prefixes[p].eni_id for p in got} == {eni}
    inside = str(ipaddress.ip_network(got[0])[3])
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=topo.instances[1].primary_eni_id,
                                                    PrivateIpAddresses=[inside]),
            "InvalidParameterValue")
    secondary = host(topo, 200)
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[secondary])
    overlapping = str(ipaddress.ip_network(f"{secondary}/28", strict=False))
    for bad in [overlapping, f"{host(topo, 100)}/28", "10.250.0.0/28", got[1],
                str(ipaddress.ip_network(f"{net[0]}/28"))]:
        refused(lambda bad=bad: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                                Ipv4Prefixes=[bad]),
                "InvalidParameterValue")
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4Prefixes=[got[0]])
    shown = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
    assert [p["Ipv4Prefix"] for p in shown["Ipv4Prefixes"]] == [got[1]]
    created = ec2.create_network_interface(SubnetId=topo.subnet_id, Ipv4PrefixCount=1)
    assert len(created["NetworkInterface"]["Ipv4Prefixes"]) == 1


def test_filters_moto_crashes_on_work(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    extra = new_eni(ec2, topo)
    ec2.attach_network_interface(NetworkInterfaceId=extra, InstanceId=topo.instances[0].instance_id,
                                 DeviceIndex=1)
    vpc = {"Name": "vpc-id", "Values": [topo.vpc_id]}
    by_index = ec2.describe_network_interfaces(
        Filters=[vpc, {"Name": "attachment.device-index", "Values": ["1"]}])["NetworkInterfaces"]
    assert [e["NetworkInterfaceId"] for e in by_index] == [extra]
    attached = ec2.describe_network_interfaces(
        Filters=[vpc, {"Name": "attachment.status", "Values": ["attached"]}])["NetworkInterfaces"]
    assert len(attached) == 3
    refused(lambda: ec2.describe_network_interfaces(Filters=[{"Name": "no-such", "Values": ["x"]}]),
            "InvalidParameterValue")


def test_unknown_instance_type_refused(gate_vpc):
    cloud, topo = gate_vpc
    refused(lambda: cloud.client().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                                 InstanceType="m5.nonsense",
                                                 SubnetId=topo.subnet_id),
            "InvalidParameterValue")


def test_new_enis_and_instances_never_take_an_address_in_use(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    taken = topo.instances[0].primary_ip
    refused(lambda: new_eni(ec2, topo, PrivateIpAddress=taken), "InvalidIPAddress.InUse")
    refused(lambda: ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                      InstanceType="m5.large", SubnetId=topo.subnet_id,
                                      PrivateIpAddress=taken), "InvalidIPAddress.InUse")
    r = ec2.run_instances(ImageId="ami-12c6146b", MinCount=3, MaxCount=3, InstanceType="t3.large",
                          SubnetId=topo.subnet_id)
    primaries = [i["PrivateIpAddress"] for i in r["Instances"]]
    owners = cloud.gate.owners()
    assert len(set(primaries)) == 3 and taken not in primaries
    assert all(owners.ips[ip].primary and owners.ips[ip].device_index == 0 for ip in primaries)


def test_secondary_enis_detach_but_the_primary_does_not(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    inst = topo.instances[0]
    primary = ec2.describe_network_interfaces(NetworkInterfaceIds=[inst.primary_eni_id])[
        "NetworkInterfaces"][0]
    refused(lambda: ec2.detach_network_interface(AttachmentId=primary["Attachment"]["AttachmentId"]),
            "OperationNotPermitted")
    extra = new_eni(ec2, topo)
    att = ec2.attach_network_interface(NetworkInterfaceId=extra, InstanceId=inst.instance_id,
                                       DeviceIndex=1)["AttachmentId"]
    ec2.detach_network_interface(AttachmentId=att)
    assert cloud.gate.owners().enis[extra].instance_id is None
    ec2.attach_network_interface(NetworkInterfaceId=extra, InstanceId=inst.instance_id, DeviceIndex=1)
    assert cloud.gate.owners().enis[extra].device_index == 1


def test_dry_run_changes_nothing(gate_vpc):
    cloud, topo = gate_vpc
    ec2 = cloud.client()
    version = cloud.gate.owners().version
    refused(lambda: new_eni(ec2, topo, DryRun=True), "DryRunOperation", 412)
    refused(lambda: ec2.terminate_instances(InstanceIds=[topo.instances[0].instance_id],
                                            DryRun=True), "DryRunOperation", 412)
    assert cloud.gate.owners().version == version
    in_subnet = ec2.describe_network_interfaces(
        Filters=[{"Name": "subnet-id", "Values": [topo.subnet_id]}])["NetworkInterfaces"]
    assert len(in_subnet) == len(topo.instances)


def available(ec2, subnet_id: str) -> int:
    return ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["AvailableIpAddressCount"]


def test_available_ip_count_counts_secondaries_and_prefixes(gate_upstream_cloud, gate_new_vpc):
    """EC2: size - 5 reserved - every assigned IP - 16 per delegated /28 (moto ignores the
    prefixes, which live only in the gate)."""
    cloud = gate_upstream_cloud
    topo = gate_new_vpc(cloud, nodes=1, subnet_prefix=26)  # 64 addresses
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    assert available(ec2, topo.subnet_id) == 64 - 5 - 1
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=2)
    assert available(ec2, topo.subnet_id) == 64 - 5 - 3
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=2)[
        "AssignedIpv4Prefixes"]
    assert len(got) == 2
    assert available(ec2, topo.subnet_id) == 64 - 5 - 3 - 32
    raw = cloud.client(endpoint=cloud.upstream_url)
    assert available(raw, topo.subnet_id) != 64 - 5 - 3 - 32  # what the gate corrects
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4Prefixes=[got[0]["Ipv4Prefix"]])
    extra = new_eni(ec2, topo, SecondaryPrivateIpAddressCount=1)
    assert available(ec2, topo.subnet_id) == 64 - 5 - 3 - 16 - 2
    # a filtered Describe of every subnet answers the same count
    every = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [topo.vpc_id]}])["Subnets"]
    assert [s["AvailableIpAddressCount"] for s in every] == [64 - 5 - 3 - 16 - 2]
    ec2.delete_network_interface(NetworkInterfaceId=extra)
    assert available(ec2, topo.subnet_id) == 64 - 5 - 3 - 16
