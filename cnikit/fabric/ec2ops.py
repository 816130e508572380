"""EC2 calls a test or benchmark makes to give a node IPs for pods wired directly: fill the
node's ENIs up to the instance type's limit, attaching more ENIs when needed."""

from __future__ import annotations

from cnikit.cloud.limits import FALLBACK, InstanceLimits


def limits(instance_type: str) -> InstanceLimits:
    return FALLBACK.get(instance_type, FALLBACK["m5.large"])


def attach_eni(cloud, fabric, node: int, device_index: int) -> str:
    ec2 = cloud.client()
    n = fabric.node(node)
    eni = ec2.create_network_interface(SubnetId=fabric.topo.subnet_id)["NetworkInterface"]
    eni_id = eni["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eni_id, InstanceId=n.instance_id,
                                 DeviceIndex=device_index)
    return eni_id


def assign_pod_ips(cloud, fabric, node: int, count: int, sync_timeout: float = 10.0
                   ) -> list[tuple[str, int]]:
    """Assign `count` new secondary IPs to the node's ENIs; [(ip, device_index)].

    Returns once the fabric routes them (it follows EC2 by itself; this only waits).
    """
    if count <= 0:
        return []
    ec2 = cloud.client()
    n = fabric.node(node)
    inst = fabric.topo.instances[n.index]
    lim = limits(inst.instance_type)
    out: list[tuple[str, int]] = []
    left = count
    for dev in range(lim.max_enis):
        if left <= 0:
            break
        snap = cloud.gate.owners()
        eni = next((e for e in snap.enis.values()
                    if e.instance_id == n.instance_id and e.device_index == dev), None)
        if eni is None:
            attach_eni(cloud, fabric, node, dev)
            snap = cloud.gate.owners()
            eni = next(e for e in snap.enis.values()
                       if e.instance_id == n.instance_id and e.device_index == dev)
        room = lim.ipv4_per_eni - len(eni.ips)
        take = min(room, left)
        if take <= 0:
            continue
        r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni.eni_id,
                                            SecondaryPrivateIpAddressCount=take)
        out += [(a["PrivateIpAddress"], dev) for a in r["AssignedPrivateIpAddresses"]]
        left -= take
    if left > 0:
        raise RuntimeError(f"{inst.instance_type} holds no more IPs ({count - left} of {count})")
    fabric.wait_synced(cloud.gate.owners().version, sync_timeout)
    return out
