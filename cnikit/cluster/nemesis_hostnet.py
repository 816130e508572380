"""The nemesis's acts on a node's own network, under the build: an ENI's interface taken
down and brought back, the policy rules and route tables a networkd restart flushes, a
pod's host-side veth deleted, an interface's MTU changed (upstream #3309, #3162).

They act only in the node namespaces the kit made, through the fabric's netlink socket of
each, never on the machine's own interfaces. Operations: host-link-down (a start, ended
with by "up" when the link is back), host-flush, host-veth-delete and host-mtu (instants).
"""

from __future__ import annotations

import socket
import threading
from typing import Protocol

from cnikit.cluster.nemesis_log import END, INFO, START
from cnikit.fabric.netlink import Netlink

# What the kernel itself puts in every namespace (`ip rule` after boot): networkd keeps
# these and removes every other rule; tables other than these are the build's own.
KERNEL_RULES = {(0, 255), (32766, 254), (32767, 253)}
KERNEL_TABLES = {253, 254, 255}
FAMILIES = (socket.AF_INET, socket.AF_INET6)


class NodeNetworks(Protocol):
    """What the nemesis needs of whoever runs the fabric (CniCluster); ValueError (one line)
    for a node or pod the run has not. Nothing here records."""

    def node_netlink(self, node: int) -> Netlink:
        """The netlink socket of the node's namespace."""

    def pod_node(self, pod: str) -> tuple[int, str]:
        """The live pod's node and address."""


def eni_ifname(device_index: int) -> str:
    """The node-side name of the ENI at `device_index` (cnikit.fabric.topology)."""
    return f"eth{device_index}"


def host_link_of(nl: Netlink, ip: str) -> str | None:
    """The node-side link a pod's address is routed to (its host veth, whatever the build
    names it): the link of the host route to ip in any table."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    host = f"{ip}/128" if family == socket.AF_INET6 else f"{ip}/32"
    oif = next((r.oif for r in nl.routes(table=None, family=family)
                if r.dst == host and r.oif), None)
    if oif is None:
        return None
    return next((link.name for link in nl.links() if link.index == oif), None)


def flush(nl: Netlink, rules: bool, tables: bool) -> dict[str, int]:
    """What a systemd-networkd restart does to a node's policy routing: every rule but the
    kernel's own removed, and every route table but main, local and default emptied.
    The counts of what went."""
    gone = {"rules": 0, "routes": 0}
    for family in FAMILIES:
        if rules:
            for r in nl.rules(family):
                if (r.priority, r.table) not in KERNEL_RULES or r.src or r.dst:
                    gone["rules"] += nl.rule_del(r.priority, r.table, r.src, r.dst)
        if tables:
            for r in nl.routes(table=None, family=family):
                if r.table not in KERNEL_TABLES:
                    gone["routes"] += nl.route_del(r.dst, r.table, r.oif, r.gateway)
    return gone


class HostNetActs:
    """A mixin of Nemesis (its `daemons`, which run the fabric, and its log)."""

    def _networks(self) -> NodeNetworks:
        if self.daemons is None:
            raise ValueError("this nemesis has no nodes")
        return self.daemons

    def _link(self, nl: Netlink, name: str):
        link = nl.link(name)
        if link is None:
            raise ValueError(f"no interface {name} on that node")
        return link

    def link_down(self, node: int, device_index: int, duration: float) -> str:
        """Take the ENI's node-side interface down; it comes back up after `duration`
        seconds (the kernel drops the routes through it meanwhile, as on a real node).
        The operation's id."""
        nl = self._networks().node_netlink(node)
        name = eni_ifname(device_index)
        target = {**self.node_target(node), "link": name}
        link = self.attempt("host-link-down", target, lambda: self._link(nl, name))
        fid = self.new_id(f"link-{node}-{device_index}")
        self.attempt("host-link-down", target, lambda: nl.link_set(link.index, up=False))
        self.record(START, "host-link-down", target, id=fid, duration=duration)

        def up() -> None:
            try:
                nl.link_set(link.index, up=True)
            except OSError as e:  # the node went with its run
                self.record(END, "host-link-down", target, id=fid, by="failed", error=str(e))
                return
            self.record(END, "host-link-down", target, id=fid, by="up")

        timer = threading.Timer(duration, up)
        timer.daemon = True
        timer.start()
        return fid

    def flush_host_routing(self, node: int, rules: bool = True, tables: bool = True) -> dict:
        """A systemd-networkd restart on the node (`flush`); what went."""
        nl = self._networks().node_netlink(node)
        target = self.node_target(node)
        gone = self.attempt("host-flush", target, lambda: flush(nl, rules, tables))
        self.record(INFO, "host-flush", target, rules=rules, tables=tables, **{
            f"{k}_removed": v for k, v in gone.items()})
        return gone

    def delete_host_veth(self, pod: str) -> str:
        """Delete the node-side end of the pod's veth (the pod's interface goes with it);
        the link's name."""
        nets = self._networks()
        node, ip = nets.pod_node(pod)
        nl = nets.node_netlink(node)
        target = {**self.node_target(node), "pod": pod, "ip": ip}
        name = host_link_of(nl, ip)
        if name is None or name.startswith("eth"):
            self.record(INFO, "host-veth-delete", target, error="no host veth routes it")
            raise ValueError(f"pod {pod} ({ip}) has no host veth routing it")
        self.attempt("host-veth-delete", {**target, "link": name},
                     lambda: nl.link_del(name=name))
        self.record(INFO, "host-veth-delete", {**target, "link": name})
        return name

    def set_mtu(self, node: int, mtu: int, device_index: int | None = None,
                pod: str | None = None) -> str:
        """Change the MTU of an ENI's interface or of a pod's host veth; the link's name."""
        nets = self._networks()
        if pod is not None:
            node, ip = nets.pod_node(pod)
            name = host_link_of(nets.node_netlink(node), ip)
            if name is None:
                raise ValueError(f"pod {pod} ({ip}) has no host veth routing it")
        else:
            name = eni_ifname(device_index or 0)
        nl = nets.node_netlink(node)
        target = {**self.node_target(node), "link": name, **({"pod": pod} if pod else {})}
        link = self.attempt("host-mtu", target, lambda: self._link(nl, name))
        self.attempt("host-mtu", target, lambda: nl.link_set(link.index, mtu=mtu))
        self.record(INFO, "host-mtu", target, mtu=mtu)
        return name
