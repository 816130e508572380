"""Seeded random traffic from several threads: EC2's invariants hold, upstream and mirror agree."""

from __future__ import annotations

import ipaddress
import os
import random
import threading
from collections import Counter

from botocore.exceptions import ClientError

ALLOWED = {"InvalidParameterValue", "PrivateIpAddressLimitExceeded", "AttachmentLimitExceeded",
           "InsufficientFreeAddressesInSubnet", "InsufficientCidrBlocks",
           "InvalidNetworkInterface.InUse", "InvalidIPAddress.InUse", "OperationNotPermitted",
           "InvalidAttachmentID.NotFound", "InvalidNetworkInterfaceID.NotFound"}


def test_random_traffic_keeps_ec2_invariants(gate_cloud, gate_new_vpc):
    seed = int(os.environ.get("CNIKIT_SEED", "4242"))
    print(f"seed={seed}")
    topo = gate_new_vpc(gate_cloud, nodes=3, subnet_prefix=26)  # 59 usable: exhaustion happens
    net = ipaddress.ip_network(topo.subnet_cidr)
    instances = [i.instance_id for i in topo.instances]
    errors: list[str] = []
    unexpected: list[str] = []

    def worker(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        ec2 = gate_cloud.client()
        for _ in range(40):
            enis = list(gate_cloud.gate.owners().enis.values())
            enis = [e for e in enis if e.subnet_id == topo.subnet_id]
            eni = rng.choice(enis)
            op = rng.random()
            try:
                if op < 0.35:
                    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni.eni_id,
                                                    SecondaryPrivateIpAddressCount=rng.randint(1, 4))
                elif op < 0.45:
                    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni.eni_id,
                                                    PrivateIpAddresses=[str(net[rng.randint(0, 63)])],
                                                    AllowReassignment=rng.random() < 0.5)
                elif op < 0.55:
                    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni.eni_id, Ipv4PrefixCount=1)
                elif op < 0.75 and len(eni.ips) > 1:
                    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni.eni_id,
                                                      PrivateIpAddresses=rng.sample(eni.ips[1:], 1))
                elif op < 0.8 and eni.prefixes:
                    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni.eni_id,
                                                      Ipv4Prefixes=eni.prefixes[:1])
                elif op < 0.88:
                    ec2.create_network_interface(SubnetId=topo.subnet_id)
                elif op < 0.95 and eni.instance_id is None:
                    ec2.attach_network_interface(NetworkInterfaceId=eni.eni_id,
                                                 InstanceId=rng.choice(instances),
                                                 DeviceIndex=rng.randint(1, 3))
                elif eni.instance_id is None:
                    ec2.delete_network_interface(NetworkInterfaceId=eni.eni_id)
            except ClientError as e:
                code = e.response["Error"]["Code"]
                errors.append(code)
                if code not in ALLOWED:
                    unexpected.append(f"{code}: {e}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not unexpected, unexpected
    print("refusals:", Counter(errors))

    snap = gate_cloud.gate.owners()
    raw = gate_cloud.client(endpoint=gate_cloud.upstream_url)
    upstream = raw.describe_network_interfaces(
        Filters=[{"Name": "subnet-id", "Values": [topo.subnet_id]}])["NetworkInterfaces"]
    held = Counter()
    addresses: set[int] = set()
    for e in upstream:
        ips = [a["PrivateIpAddress"] for a in e["PrivateIpAddresses"]]
        held.update(ips)
        mine = snap.enis[e["NetworkInterfaceId"]]
        assert sorted(ips) == sorted(mine.ips), e["NetworkInterfaceId"]
        assert ips and e["PrivateIpAddress"] == mine.primary_ip
        if mine.instance_id is not None:  # m5.large: 10 slots, a /28 prefix is one
            assert len(mine.ips) + len(mine.prefixes) <= 10
        for ip in ips:
            value = int(ipaddress.ip_address(ip))
            assert ipaddress.ip_address(ip) in net
            assert int(net.network_address) + 4 <= value < int(net.broadcast_address)
            addresses.add(value)
    for info in snap.enis.values():
        for p in info.prefixes if info.subnet_id == topo.subnet_id else ():
            block = ipaddress.ip_network(p)
            assert block.subnet_of(net) and block.prefixlen == 28
            span = set(range(int(block.network_address), int(block.broadcast_address) + 1))
            assert not span & addresses, f"prefix {p} overlaps an address or another prefix"
            addresses |= span
    assert [ip for ip, n in held.items() if n > 1] == []
    attached = Counter((o.instance_id, o.device_index) for o in snap.enis.values()
                       if o.instance_id in instances)
    assert all(n == 1 for n in attached.values())
    assert all(sum(1 for (i, _) in attached if i == inst) <= 3 for inst in instances)
