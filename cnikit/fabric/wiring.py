"""The pod data plane, as upstream's CNI plugin builds it (DESIGN.md). Shared by the fabric
(pods wired directly) and the cnikit CNI plugin, so both give pods the same network.

Pod side:  eth0 holds podIP/32; `169.254.1.1 dev eth0 scope link`; `default via 169.254.1.1`;
           a permanent neighbour 169.254.1.1 -> host veth MAC.
Host side: `podIP/32 dev <veth> scope link`; a permanent neighbour podIP -> pod eth0 MAC
           (ours: dynamic ones overflow the global ARP limits at scale: a 1,000-pod mesh lost 20% of probes);
           rule 512 `to podIP lookup main`; for a pod on secondary ENI N, rule 1536
           `from podIP lookup N+1`, table N+1 holding `<router> dev ethN scope link` and
           `default via <router> dev ethN`.

An IPv6 pod (the VPC CNI's IPv6 mode) is wired the same way with IPv6 values: podIP/128,
`default via fe80::1 dev eth0` with a permanent neighbour fe80::1 -> host veth MAC, host
side `podIP/128 dev <veth>`, its neighbour and rule 512; it lives on the primary ENI only
(upstream's IPv6 mode attaches no secondary ENIs).

Both veth ends get no automatic IPv6 link-local address: thousands of veths each doing DAD,
router solicitations and MLD reports is kernel work that slows a big run; the IPv6 next
hop is a fixed link-local answered by a permanent neighbour, so none is needed.

Imports only the standard library and our netlink module: a plugin imports it per pod.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
from typing import NamedTuple

from cnikit.fabric import netns
from cnikit.fabric.netlink import RT_TABLE_MAIN, Netlink, NetlinkError

POD_GATEWAY = "169.254.1.1"
POD_GATEWAY6 = "fe80::1"
RULE_TO_POD = 512
RULE_FROM_POD = 1536


def host_veth_name(namespace: str, pod: str, prefix: str = "eni") -> str:
    """Upstream's name: prefix + first 11 hex digits of sha1("<namespace>.<pod>")."""
    return prefix + hashlib.sha1(f"{namespace}.{pod}".encode()).hexdigest()[:11]


def _macs(host_veth: str) -> tuple[str, str]:
    """Stable, locally administered unicast MACs for both ends, derived from the veth name."""
    d = hashlib.sha1(host_veth.encode()).digest()
    host = "02:" + ":".join(f"{b:02x}" for b in d[:5])
    pod = "0a:" + ":".join(f"{b:02x}" for b in d[5:10])
    return host, pod


def eni_table(device_index: int) -> int:
    return device_index + 1


def host_route(ip: str) -> str:
    """The pod address as a host route: ip/32, or ip/128 for IPv6."""
    return f"{ip}/128" if ":" in ip else f"{ip}/32"


class PodWiring(NamedTuple):
    ip: str
    host_veth: str
    host_mac: str
    pod_ifname: str
    pod_mac: str
    device_index: int

    @property
    def table(self) -> int:
        return RT_TABLE_MAIN if self.device_index == 0 else eni_table(self.device_index)


def netlink_in(ns: str | os.PathLike | int) -> Netlink:
    """A netlink socket inside a namespace (name under /run/netns, a path or an fd)."""
    with netns.entered(ns):
        return Netlink()


def setup_eni_table(node: Netlink, device_index: int, router: str) -> None:
    """Route table N+1 of secondary ENI eth<N>: what its pods' rule 1536 looks up. Idempotent."""
    ifname = f"eth{device_index}"
    index = node.link_index(ifname)
    if index is None:
        raise NetlinkError(19, f"{ifname} not found in the node namespace")
    table = eni_table(device_index)
    node.route_replace(f"{router}/32", oif=index, table=table)
    node.route_replace("default", gateway=router, oif=index, table=table)


def wire(node: Netlink, pod: Netlink, pod_ns_fd: int, ip: str, host_veth: str,
         ifname: str = "eth0", device_index: int = 0, router: str | None = None,
         mtu: int | None = None) -> PodWiring:
    """Give the pod namespace `ip` through a veth pair to the node. All or nothing.

    `router` (the subnet's router address) is needed only for a secondary ENI, to set up
    its route table if nobody did yet.
    """
    host_mac, pod_mac = _macs(host_veth)
    w = PodWiring(ip, host_veth, host_mac, ifname, pod_mac, device_index)
    v6 = ":" in ip
    if v6 and device_index:
        raise NetlinkError(errno.EINVAL, f"IPv6 pod {ip}: IPv6 pods live on the primary ENI")
    gateway, default, plen = (POD_GATEWAY6, "::/0", 128) if v6 else (POD_GATEWAY, "default", 32)
    try:
        try:
            node.veth_add(host_veth, ifname, peer_ns_fd=pod_ns_fd, mac=host_mac, peer_mac=pod_mac)
        except NetlinkError as e:
            if e.errno != errno.EEXIST:
                raise
            # A veth left from an earlier sandbox of the same pod, its namespace not yet gone.
            node.link_del(name=host_veth)
            node.veth_add(host_veth, ifname, peer_ns_fd=pod_ns_fd, mac=host_mac, peer_mac=pod_mac)
        # pod side, in one round trip
        pidx = pod.link_index(ifname)
        with pod.batch():
            pod.link_set(pidx, up=True, mtu=mtu, no_ipv6_ll=True)
            pod.link_set(name="lo", up=True)
            pod.addr_add(pidx, ip, plen)
            if not v6:  # an IPv6 link-local next hop is on-link by definition
                pod.route_replace(f"{POD_GATEWAY}/32", oif=pidx)
            pod.route_replace(default, gateway=gateway, oif=pidx)
            pod.neigh_replace(pidx, gateway, host_mac)
        # host side, in one round trip
        hidx = node.link_index(host_veth)
        with node.batch():
            node.link_set(hidx, up=True, mtu=mtu, no_ipv6_ll=True)
            node.route_replace(host_route(ip), oif=hidx)
            node.neigh_replace(hidx, ip, pod_mac)
            node.rule_add(RULE_TO_POD, RT_TABLE_MAIN, dst=host_route(ip))
            if device_index:
                if router:
                    setup_eni_table(node, device_index, router)
                node.rule_add(RULE_FROM_POD, eni_table(device_index), src=f"{ip}/32")
        # Usually already true by now: without it the pod's first packets are dropped.
        if not (pod.wait_oper_up(ifname) and node.wait_oper_up(host_veth)):
            raise NetlinkError(errno.ETIMEDOUT, f"{host_veth}/{ifname} did not come up")
    except BaseException:
        with contextlib.suppress(Exception):
            unwire(node, ip, host_veth, device_index)
        raise
    return w


def unwire(node: Netlink, ip: str, host_veth: str, device_index: int | None = None,
           delete_link: bool = True) -> None:
    """Undo `wire` on the node side; whatever is already gone is fine.

    Deleting the host veth removes its peer, its route and its neighbour. device_index None
    removes any rule 1536 for the IP, whatever table it points at. delete_link=False leaves
    the veth to die with the pod namespace the caller removes next: deleting a link waits for
    an RCU grace period (about 35 ms), removing a namespace does not.
    """
    node.rule_del(RULE_TO_POD, RT_TABLE_MAIN, dst=host_route(ip))
    if device_index is None and ":" not in ip:
        for r in node.rules():
            if r.priority == RULE_FROM_POD and r.src == f"{ip}/32":
                node.rule_del(RULE_FROM_POD, r.table, src=r.src)
    elif device_index and ":" not in ip:
        node.rule_del(RULE_FROM_POD, eni_table(device_index), src=f"{ip}/32")
    if delete_link:
        node.link_del(name=host_veth)
    else:
        index = node.link_index(host_veth)
        if index is not None:  # without its link the route went already; never touch another's
            node.route_del(host_route(ip), oif=index)


def pod_view(pod: Netlink, ifname: str = "eth0") -> dict:
    """What the pod namespace holds on ifname: {mac, ips, gateway} (for checking a CNI result)."""
    link = pod.link(ifname)
    if link is None:
        return {"ifname": ifname, "present": False, "ips": [], "mac": None, "gateway": None}
    ips = [f"{a.ip}/{a.prefixlen}" for a in pod.addrs(link.index)]
    ips += [f"{a.ip}/{a.prefixlen}" for a in pod.addrs(link.index, socket.AF_INET6)]
    gw = next((r.gateway for r in pod.routes() if r.dst == "default"), None) or next(
        (r.gateway for r in pod.routes(family=socket.AF_INET6) if r.dst == "default"), None)
    return {"ifname": ifname, "present": True, "mac": link.mac, "ips": ips, "gateway": gw,
            "up": link.up}
