"""Upstream #3489: in IPv6 mode, ipamd exits at start-up on an unmanaged ENI of the other
family.

An IPv6 node carries a second ENI that the CNI must leave alone (tagged
`node.k8s.amazonaws.com/no_manage=true`: a storage or appliance interface) in an IPv4-only
subnet. IMDS serves no `subnet-ipv6-cidr-blocks` for it (404). v1.20.0-v1.20.4's
getENIMetadata turned that 404 into an error that failed the read of every ENI, ipamd's
init with it ("failed to retrieve attached ENIs info"), and aws-node exited, again at each
restart. Fixed in v1.20.5 (#3489's PR: a 404 there means "no IPv6 block").
"""

from __future__ import annotations

import ipaddress
import signal

from cnikit.scenarios.common import peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
NO_MANAGE = "node.k8s.amazonaws.com/no_manage"


@scenario(
    "ipv6-unmanaged-ipv4-eni",
    "upstream 3489: an IPv6 node's unmanaged IPv4-only ENI, then the daemon restarts",
    why="v1.20.4 fails init on the ENI's missing subnet-ipv6-cidr-blocks and never comes "
        "back; 1.18.x and hardened use the primary ENI's /80 and skip the other ENI.",
    nodes=2,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    peers(ctx, node=NODE, count=2)
    eni = _unmanaged_ipv4_eni(ctx)
    ctx.step("an unmanaged ENI of an IPv4-only subnet attached to the node", eni=eni)
    ctx.kill_daemon(NODE, signal.SIGTERM)
    # Not ready within the build's own readiness timeout: a liveness violation.
    ctx.restart_daemon(NODE)
    ctx.step("the daemon restarted")
    peers(ctx, node=NODE, count=2)  # each must get an address of the node's /80
    ctx.step("new pods on the node")


def _unmanaged_ipv4_eni(ctx: Ctx) -> str:
    """An IPv4-only subnet beside the node's, an ENI there tagged no_manage, attached to the
    node at the next device index, once IMDS lists it (what the restart will read)."""
    ec2 = ctx.cloud.client()
    topo = ctx.fabric.topo
    used = {topo.subnet_cidr}
    cidr = next(str(n) for n in ipaddress.ip_network(topo.vpc_cidr).subnets(new_prefix=24)
                if str(n) not in used and n.network_address != ipaddress.ip_network(
                    topo.vpc_cidr).network_address)
    subnet = ec2.create_subnet(VpcId=topo.vpc_id, CidrBlock=cidr,
                               AvailabilityZone=topo.az)["Subnet"]["SubnetId"]
    eni = ec2.create_network_interface(
        SubnetId=subnet, Description="an appliance's interface",
        TagSpecifications=[{"ResourceType": "network-interface",
                            "Tags": [{"Key": NO_MANAGE, "Value": "true"}]}],
    )["NetworkInterface"]
    instance = topo.instances[NODE].instance_id
    taken = {e.device_index for e in ctx.gate.owners().enis.values()
             if e.instance_id == instance and e.device_index is not None}
    device = next(i for i in range(1, 16) if i not in taken)
    ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                 InstanceId=instance, DeviceIndex=device)
    ctx.wait_until(lambda: ctx.imds_served(NODE, eni["MacAddress"].lower()) is not None, 10,
                   "IMDS lists the new ENI")
    return eni["NetworkInterfaceId"]
