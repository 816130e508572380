"""What the VPC should look like for one EC2 ownership snapshot (the model, no netlink).

The fabric plays the hypervisor: an ENI attached to one of our instances is a link in that
node; an IP or /28 prefix EC2 assigns to it is routed to that ENI, and to no other. The
same holds for IPv6: each address (/128) and delegated /80 goes to its ENI's link, the
next hop being the node end's link-local address (NODE_LL), as EC2 routes IPv6 on-link.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

# The link-local addresses of every ENI link: the VPC router's end, the node's end. Each
# link is its own segment, so every link may use the same two.
ROUTER_LL = "fe80::1"
NODE_LL = "fe80::2"


@dataclass(frozen=True)
class EniLinkSpec:
    eni_id: str
    node: int
    device_index: int
    mac: str
    primary_ip: str
    subnet_id: str
    ipv6: str | None = None  # the ENI's first IPv6 address, which the node's link holds


def desired_links(snap, instance_to_node: dict[str, int]) -> dict[str, EniLinkSpec]:
    """eni_id -> link, for every ENI attached (with a device index) to one of our instances."""
    out = {}
    for eni in snap.enis.values():
        node = instance_to_node.get(eni.instance_id or "")
        if node is None or eni.device_index is None:
            continue
        out[eni.eni_id] = EniLinkSpec(eni.eni_id, node, eni.device_index, eni.mac.lower(),
                                      eni.primary_ip, eni.subnet_id,
                                      eni.ipv6s[0] if eni.ipv6s else None)
    return out


def desired_routes(snap, links: dict[str, EniLinkSpec]) -> dict[str, str]:
    """cidr -> eni_id: every secondary IP (as /32) and prefix held by an ENI we have a link for.

    An ENI's primary IP is left out: its link carries it as `primary/32 dev link`.
    """
    out: dict[str, str] = {}
    for ip, owner in snap.ips.items():
        if owner.eni_id in links and not owner.primary:
            out[f"{ip}/32"] = owner.eni_id
    for prefix, owner in snap.prefixes.items():
        if owner.eni_id in links:
            out[str(ipaddress.ip_network(prefix, strict=False))] = owner.eni_id
    for ip, owner in snap.ipv6s.items():
        if owner.eni_id in links:
            out[f"{ip}/128"] = owner.eni_id
    for prefix, owner in snap.ipv6_prefixes.items():
        if owner.eni_id in links:
            out[str(ipaddress.ip_network(prefix, strict=False))] = owner.eni_id
    return out


def router_of(subnet_cidr: str) -> str:
    """The subnet's router: its network address + 1, as in a VPC."""
    return str(ipaddress.ip_network(subnet_cidr, strict=False).network_address + 1)


def diff(current: dict[str, object], desired: dict[str, object]) -> tuple[dict, list]:
    """(to add or change: {key: value}, to remove: [key])."""
    put = {k: v for k, v in desired.items() if current.get(k) != v}
    gone = [k for k in current if k not in desired]
    return put, gone
