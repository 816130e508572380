"""An IPv6 pod's IPv4 egress, as upstream's egress-cni plugin builds it (the VPC CNI's IPv6
mode, ENABLE_V4_EGRESS): the pod reaches IPv4 destinations through its node, whose IPv4
address they see.

Pod side:  `v4if0` holds X/32 of the egress range (169.254.172.0/22 upstream);
           `<gw> dev v4if0 scope link`, `default via <gw> dev v4if0`, a permanent neighbour
           gw -> host veth MAC (gw: the range's first host).
Host side: a veth of its own holding gw/32; `X/32 dev <veth> scope link` (the return
           path), a permanent neighbour X -> pod MAC; one SNAT rule for the whole range to
           the node's IPv4 address (nat POSTROUTING).

DEL frees X and leaves the veth to die with the pod's namespace, as upstream's does: until
the runtime removes that namespace, the old host route X/32 is still there. A new pod given
X meanwhile meets it (upstream #3702): adding its own route then fails with EEXIST, and a
build that ignores that error (upstream before v1.22.4) is left with no return path once the
old namespace goes. `replace_stale=True` replaces the old route instead: X is the new pod's.

Imports only the standard library and our netlink module (a plugin may import it per pod).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import ipaddress
import subprocess
from typing import NamedTuple

from cnikit.fabric.netlink import Netlink, NetlinkError

IFNAME = "v4if0"
DEFAULT_RANGE = "169.254.172.0/22"


class EgressWiring(NamedTuple):
    ip: str
    host_veth: str
    host_mac: str
    pod_mac: str


def gateway_of(egress_range: str) -> str:
    return str(ipaddress.IPv4Network(egress_range).network_address + 1)


def host_veth_name(container_id: str) -> str:
    """A name of its own per sandbox (upstream's is random: `veth` and 8 characters)."""
    return "veth" + hashlib.sha1(f"egress.{container_id}".encode()).hexdigest()[:11]


def _macs(host_veth: str) -> tuple[str, str]:
    d = hashlib.sha1(host_veth.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in d[:5]), "0e:" + ":".join(f"{b:02x}" for b in d[5:10])


def snat(egress_range: str, node_ipv4: str, node_ns_path: str | None = None) -> None:
    """The node's SNAT rule for the range (idempotent): what makes an IPv6 pod's IPv4
    traffic the node's. In this process's namespace unless `node_ns_path` is given."""
    rule = ["POSTROUTING", "-s", egress_range, "!", "-d", egress_range, "-j", "SNAT",
            "--to-source", node_ipv4]
    enter = ["nsenter", f"--net={node_ns_path}"] if node_ns_path else []
    base = [*enter, "iptables", "-w", "-t", "nat"]
    if subprocess.run(base + ["-C", *rule], capture_output=True, timeout=30).returncode == 0:
        return
    r = subprocess.run(base + ["-A", *rule], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise NetlinkError(errno.EIO, f"SNAT for {egress_range}: {r.stderr.strip()}")


def wire(node: Netlink, pod: Netlink, pod_ns_fd: int, ip: str, host_veth: str,
         egress_range: str, replace_stale: bool) -> EgressWiring:
    """The pod's v4if0 with `ip`, and its host side. All or nothing."""
    gw = gateway_of(egress_range)
    host_mac, pod_mac = _macs(host_veth)
    try:
        node.veth_add(host_veth, IFNAME, peer_ns_fd=pod_ns_fd, mac=host_mac, peer_mac=pod_mac)
        pidx = pod.link_index(IFNAME)
        with pod.batch():
            pod.link_set(pidx, up=True, no_ipv6_ll=True)
            pod.addr_add(pidx, ip, 32)
            pod.route_replace(f"{gw}/32", oif=pidx)
            pod.route_replace("default", gateway=gw, oif=pidx)
            pod.neigh_replace(pidx, gw, host_mac)
        hidx = node.link_index(host_veth)
        with node.batch():
            node.link_set(hidx, up=True, no_ipv6_ll=True)
            node.addr_add(hidx, gw, 32, noprefixroute=True)
            node.neigh_replace(hidx, ip, pod_mac)
        _return_route(node, ip, hidx, replace_stale)
        if not (pod.wait_oper_up(IFNAME) and node.wait_oper_up(host_veth)):
            raise NetlinkError(errno.ETIMEDOUT, f"{host_veth}/{IFNAME} did not come up")
    except BaseException:
        with contextlib.suppress(Exception):
            node.link_del(name=host_veth)
        raise
    return EgressWiring(ip, host_veth, host_mac, pod_mac)


def _return_route(node: Netlink, ip: str, hidx: int, replace_stale: bool) -> None:
    if replace_stale:
        node.route_replace(f"{ip}/32", oif=hidx)
    else:  # upstream's setupHostVethV4 before v1.22.4: an EEXIST taken as done
        node.route_add(f"{ip}/32", oif=hidx)


def pod_egress_ip(pod: Netlink) -> str | None:
    """The address the pod's v4if0 holds, if it has one."""
    link = pod.link(IFNAME)
    if link is None:
        return None
    addrs = pod.addrs(link.index)
    return addrs[0].ip if addrs else None
