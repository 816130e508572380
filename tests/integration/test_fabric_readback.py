"""The data plane read back through pyroute2, a second netlink implementation.

The fabric, the plugin and the daemon write addresses, routes, rules and neighbours with the
kit's hand-written netlink (cnikit.fabric.netlink). Here pyroute2 reads every namespace back
and each table is compared, exactly, with what EC2 and the design say it must hold:

    pod   eth0 podIP/32; 169.254.1.1/32 dev eth0 scope link; default via 169.254.1.1;
          a permanent neighbour 169.254.1.1 -> the host veth's MAC; eth0 and the host
          veth are each other's peer
    node  podIP/32 dev <veth> scope link, the veth named eni+sha1("<ns>.<pod>")[:11];
          a permanent neighbour podIP -> the pod eth0's MAC; rule 512 to podIP lookup
          main; for a pod on ENI N > 0, rule 1536 from podIP lookup N+1, and table N+1
          `<router> dev ethN scope link`, `default via <router> dev ethN`; ethN has the
          ENI's MAC and primary IP; eth0 has `default via <router> onlink`
    vpc   each ENI's primary IP/32 dev <its link> with a permanent neighbour to its MAC;
          every secondary IP EC2 gives the ENI: IP/32 via <primary> dev <link> onlink

Pods on the primary and a secondary ENI, both ways the kit makes them: wired directly by
the fabric, and by cnikit-cni through the reference daemon. The last tests break one entry
of each kind and check that the read-back names it, so a wrong data plane fails here.
pyroute2's IPRoute(netns=...) would create a missing namespace: flags=0 everywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import socket
import time
from dataclasses import dataclass

import pytest

from tests.waiting import wait_for

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

POD_GW = "169.254.1.1"
MAIN, LOCAL = 254, 255
SCOPE_UNIVERSE, SCOPE_LINK = 0, 253
RTNH_F_ONLINK = 4
NUD_PERMANENT = 0x80


# ---- what pyroute2 reads ------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mac: str
    peer: int | None  # a veth's IFLA_LINK: its peer's index (in the peer's namespace)


@dataclass(frozen=True)
class Route:
    table: int
    dst: str  # "default" or "a.b.c.d/len"
    gateway: str | None
    dev: str
    scope: int
    onlink: bool


class View:
    """One namespace as pyroute2 sees it (the local table and the kernel's default rules
    are left out: nobody in the kit writes them)."""

    def __init__(self, ns: str):
        from pyroute2 import IPRoute

        with IPRoute(netns=ns, flags=0) as ipr:
            self.links = {m["index"]: Link(m["index"], m.get("ifname"), m.get("address"),
                                           m.get("link"))
                          for m in ipr.get_links()}
            name = {i: link.name for i, link in self.links.items()}
            self.addrs = {(name[m["index"]], m.get("address"), m["prefixlen"])
                          for m in ipr.get_addr(family=socket.AF_INET)}
            self.routes = {
                Route(m.get("table"), f"{m.get('dst')}/{m['dst_len']}" if m["dst_len"] else "default",
                      m.get("gateway"), name.get(m.get("oif")), m["scope"],
                      bool(m["flags"] & RTNH_F_ONLINK))
                for m in ipr.route("dump", family=socket.AF_INET) if m.get("table") != LOCAL}
            self.rules = {
                (m.get("priority"), _cidr(m.get("src"), m["src_len"]),
                 _cidr(m.get("dst"), m["dst_len"]), m.get("table"))
                for m in ipr.get_rules(family=socket.AF_INET)
                if m.get("priority") not in (None, 0, 32766, 32767)}
            self.neighs = {(name[m["ifindex"]], m.get("dst")): (m.get("lladdr"),
                                                                bool(m["state"] & NUD_PERMANENT))
                           for m in ipr.get_neighbours(family=socket.AF_INET)}

    def link(self, name: str) -> Link | None:
        return next((link for link in self.links.values() if link.name == name), None)

    def table(self, table: int) -> set[Route]:
        return {r for r in self.routes if r.table == table}


def _cidr(ip: str | None, plen: int) -> str | None:
    return f"{ip}/{plen}" if ip else None


# ---- what it must hold ----------------------------------------------------------------------

@dataclass(frozen=True)
class PodRef:
    ns: str  # the pod's namespace name
    node: int
    ip: str
    veth: str  # the host veth's name, by upstream's rule


def veth_for(namespace: str, pod: str) -> str:
    """Upstream's host veth name: eni + the first 11 hex digits of sha1("<namespace>.<pod>")."""
    return "eni" + hashlib.sha1(f"{namespace}.{pod}".encode()).hexdigest()[:11]


@dataclass(frozen=True)
class Eni:
    eni_id: str
    instance_id: str
    device_index: int
    mac: str
    primary: str
    secondaries: frozenset[str]


def ec2_enis(cloud, instance_ids: list[str]) -> dict[str, Eni]:
    """EC2's truth, by DescribeNetworkInterfaces through the gate (as a real node reads it)."""
    out = {}
    resp = cloud.client().describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": instance_ids}])
    for e in resp["NetworkInterfaces"]:
        ips = {a["PrivateIpAddress"] for a in e["PrivateIpAddresses"]}
        out[e["NetworkInterfaceId"]] = Eni(e["NetworkInterfaceId"], e["Attachment"]["InstanceId"],
                                           e["Attachment"]["DeviceIndex"], e["MacAddress"],
                                           e["PrivateIpAddress"],
                                           frozenset(ips - {e["PrivateIpAddress"]}))
    return out


def diff(errors: list[str], what: str, got, want) -> None:
    if got != want:
        got_s, want_s = (set(x.items()) if isinstance(x, dict) else set(x) for x in (got, want))
        errors.append(f"{what}: missing {sorted(map(str, want_s - got_s))}, "
                      f"unexpected {sorted(map(str, got_s - want_s))}")


def readback(fabric, cloud, pods: list[PodRef]) -> list[str]:
    """Every mismatch between the namespaces (read by pyroute2) and EC2 + the design."""
    for _ in range(10):  # EC2 changing under the read (a daemon's pool) makes it a retry
        before = ec2_enis(cloud, [n.instance_id for n in fabric.nodes])
        errors = _readback(fabric, before, pods)
        if ec2_enis(cloud, [n.instance_id for n in fabric.nodes]) == before:
            return errors
        time.sleep(0.2)
    return ["EC2 kept changing during the read-back"]


def _readback(fabric, enis: dict[str, Eni], pods: list[PodRef]) -> list[str]:
    errors: list[str] = []
    subnet = ipaddress.ip_network(fabric.topo.subnet_cidr)
    router = str(subnet.network_address + 1)  # EC2's subnet router: the first host
    owner = {ip: e for e in enis.values() for ip in e.secondaries}
    vpc = View(fabric.vpc.name)
    vpc_end: dict[str, Link] = {}  # eni id -> its link in the vpc namespace

    for node in fabric.nodes:
        view = View(node.name)
        mine = [e for e in enis.values() if e.instance_id == node.instance_id]
        on_node = [p for p in pods if p.node == node.index]
        pod_views = {p.ns: View(p.ns) for p in on_node}
        want_main = {Route(MAIN, "default", router, "eth0", SCOPE_UNIVERSE, True)}
        want_rules, want_neighs, want_tables = set(), {}, {}
        for e in mine:
            dev = f"eth{e.device_index}"
            link = view.link(dev)
            if link is None:
                errors.append(f"{node.name}: no {dev} for {e.eni_id}")
                continue
            if link.mac != e.mac:
                errors.append(f"{node.name} {dev}: MAC {link.mac}, EC2 says {e.mac}")
            diff(errors, f"{node.name} {dev} addresses",
                 {a for a in view.addrs if a[0] == dev}, {(dev, e.primary, subnet.prefixlen)})
            router_mac, permanent = view.neighs.get((dev, router), (None, False))
            if not permanent:
                errors.append(f"{node.name} {dev}: no permanent neighbour for router {router}")
            end = next((v for v in vpc.links.values() if v.mac == router_mac), None)
            if end is None:
                errors.append(f"{node.name} {dev}: router MAC {router_mac} is no vpc link's")
            else:
                vpc_end[e.eni_id] = end
            want_neighs[(dev, router)] = (router_mac, True)
        for p in on_node:
            e = owner.get(p.ip)
            if e is None or e.instance_id != node.instance_id:
                errors.append(f"{p.ns}: {p.ip} is not on an ENI of {node.instance_id} in EC2")
                continue
            pv = pod_views[p.ns]
            eth0, veth = pv.link("eth0"), view.link(p.veth)
            if eth0 is None or veth is None:
                errors.append(f"{p.ns}: eth0 {eth0} / host veth {p.veth} {veth} missing")
                continue
            if (eth0.peer, veth.peer) != (veth.index, eth0.index):
                errors.append(f"{p.ns}: eth0 and {p.veth} are not each other's veth peer")
            # pod side
            diff(errors, f"{p.ns} addresses", pv.addrs,
                 {("lo", "127.0.0.1", 8), ("eth0", p.ip, 32)})
            diff(errors, f"{p.ns} routes", pv.routes,
                 {Route(MAIN, f"{POD_GW}/32", None, "eth0", SCOPE_LINK, False),
                  Route(MAIN, "default", POD_GW, "eth0", SCOPE_UNIVERSE, False)})
            diff(errors, f"{p.ns} permanent neighbours",
                 {k: v for k, v in pv.neighs.items() if v[1]},
                 {("eth0", POD_GW): (veth.mac, True)})
            diff(errors, f"{p.ns} rules", pv.rules, set())
            # node side
            want_main.add(Route(MAIN, f"{p.ip}/32", None, p.veth, SCOPE_LINK, False))
            want_neighs[(p.veth, p.ip)] = (eth0.mac, True)
            want_rules.add((512, None, f"{p.ip}/32", MAIN))
            if e.device_index:
                table = e.device_index + 1
                want_rules.add((1536, f"{p.ip}/32", None, table))
                dev = f"eth{e.device_index}"
                want_tables[table] = {Route(table, f"{router}/32", None, dev, SCOPE_LINK, False),
                                      Route(table, "default", router, dev, SCOPE_UNIVERSE, False)}
        diff(errors, f"{node.name} main table", view.table(MAIN), want_main)
        diff(errors, f"{node.name} rules", view.rules, want_rules)
        diff(errors, f"{node.name} permanent neighbours",
             {k: v for k, v in view.neighs.items() if v[1]}, want_neighs)
        for table in sorted({r.table for r in view.routes} - {MAIN} | set(want_tables)):
            # A secondary ENI's table may exist with no pod on it yet (set up ahead), but
            # then it holds exactly what a pod on that ENI would need.
            dev_index = table - 1
            dev = f"eth{dev_index}"
            want = want_tables.get(table) or {
                Route(table, f"{router}/32", None, dev, SCOPE_LINK, False),
                Route(table, "default", router, dev, SCOPE_UNIVERSE, False)}
            if not any(e.device_index == dev_index for e in mine):
                errors.append(f"{node.name}: table {table} for {dev}, which has no ENI in EC2")
            diff(errors, f"{node.name} table {table}", view.table(table), want)

    want_vpc, want_vpc_neighs = set(), {}
    for e in enis.values():
        end = vpc_end.get(e.eni_id)
        if end is None:
            continue
        want_vpc.add(Route(MAIN, f"{e.primary}/32", None, end.name, SCOPE_LINK, False))
        want_vpc_neighs[(end.name, e.primary)] = (e.mac, True)
        for ip in e.secondaries:
            want_vpc.add(Route(MAIN, f"{ip}/32", e.primary, end.name, SCOPE_UNIVERSE, True))
    diff(errors, "vpc routes to ENIs", {r for r in vpc.table(MAIN) if r.dev in
                                        {v.name for v in vpc_end.values()}}, want_vpc)
    diff(errors, "vpc permanent neighbours",
         {k: v for k, v in vpc.neighs.items() if v[1]}, want_vpc_neighs)
    return errors


# ---- the pods -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def direct():
    """Pods wired by the fabric itself: node 0 across eth0 and eth1, one pod on node 1."""
    from cnikit.cloud import Cloud
    from cnikit.fabric import ec2ops
    from cnikit.fabric.topology import Fabric

    with Cloud.start() as cloud:
        topo = cloud.bootstrap(nodes=2, instance_type="m5.large")
        with Fabric(cloud, topo) as fabric:
            plan = [(0, ip) for ip, _ in ec2ops.assign_pod_ips(cloud, fabric, 0, 12)]
            plan += [(1, ip) for ip, _ in ec2ops.assign_pod_ips(cloud, fabric, 1, 1)]
            pods = []
            for node, ip in plan:
                pod = fabric.add_pod(node, ip)
                pods.append(PodRef(pod.name, node, ip, veth_for(pod.path, pod.name)))
            yield fabric, cloud, pods


@pytest.fixture(scope="module")
def cluster():
    """Pods wired by cnikit-cni through the reference daemon (hardened), enough on node 0
    that some land on a secondary ENI (m5.large: 9 secondary IPs per ENI)."""
    from cnikit.cluster import CniCluster
    from cnikit.fabric.cni import CniError

    with CniCluster(nodes=2, profile="hardened", scale=0.05) as c:
        # Pods only once the warm ENI is attached: an ADD racing the attach can find eth1
        # not yet up and fail with ENETDOWN (code 5) instead of "try again" (11).
        settled = lambda: all(c.status(n)["withinTargets"] for n in range(c.n_nodes))  # noqa: E731
        wait_for(settled, 30, "every daemon's pool within its targets")
        pods = []
        for i, node in enumerate([0] * 13 + [1] * 2):
            name = f"rb-{i}"
            end = time.monotonic() + 20
            while True:  # like kubelet: "try again later" (11) while the pool grows
                try:
                    pod = c.add_pod(node, name)
                    break
                except CniError as e:
                    if e.code != 11 or time.monotonic() > end:
                        raise
                    time.sleep(0.1)
            pods.append(PodRef(pod.name, node, pod.ip, veth_for("default", name)))
        wait_for(settled, 30, "every daemon's pool within its targets")
        yield c.fabric, c.cloud, pods


def device_indexes(cloud, fabric, pods) -> set[int]:
    enis = ec2_enis(cloud, [n.instance_id for n in fabric.nodes])
    owner = {ip: e for e in enis.values() for ip in e.secondaries}
    return {owner[p.ip].device_index for p in pods if p.ip in owner}


def test_fabric_wired_pods_read_back_exactly(direct):
    fabric, cloud, pods = direct
    assert device_indexes(cloud, fabric, pods) == {0, 1}, "pods on eth0 and eth1 of node 0"
    assert readback(fabric, cloud, pods) == []


def test_daemon_wired_pods_read_back_exactly(cluster):
    fabric, cloud, pods = cluster
    assert {0, 1} <= device_indexes(cloud, fabric, pods), "pods on the primary and a secondary ENI"
    assert readback(fabric, cloud, pods) == []


# ---- a wrong data plane fails the read-back -------------------------------------------------

@contextlib.contextmanager
def ipr_in(ns: str):
    from pyroute2 import IPRoute

    with IPRoute(netns=ns, flags=0) as ipr:
        yield ipr


def secondary_pod(cloud, fabric, pods) -> tuple[PodRef, int]:
    enis = ec2_enis(cloud, [n.instance_id for n in fabric.nodes])
    owner = {ip: e for e in enis.values() for ip in e.secondaries}
    pod = next(p for p in pods if owner[p.ip].device_index > 0)
    return pod, owner[pod.ip].device_index + 1


def test_a_missing_rule_1536_is_named(direct):
    fabric, cloud, pods = direct
    pod, table = secondary_pod(cloud, fabric, pods)
    node = fabric.nodes[pod.node].name
    with ipr_in(node) as ipr:
        ipr.rule("del", priority=1536, src=pod.ip, src_len=32, table=table)
    try:
        errors = readback(fabric, cloud, pods)
        assert any(f"{node} rules: missing [\"(1536, '{pod.ip}/32', None, {table})\"]" in e
                   for e in errors), errors
    finally:
        with ipr_in(node) as ipr:
            ipr.rule("add", priority=1536, src=pod.ip, src_len=32, table=table)
    assert readback(fabric, cloud, pods) == []


def test_a_wrong_gateway_neighbour_in_a_pod_is_named(direct):
    fabric, cloud, pods = direct
    pod = pods[0]
    with ipr_in(pod.ns) as ipr:
        idx = ipr.link_lookup(ifname="eth0")[0]
        right = next(n.get("lladdr") for n in ipr.get_neighbours(family=socket.AF_INET)
                     if n.get("dst") == POD_GW)
        ipr.neigh("replace", dst=POD_GW, lladdr="02:00:00:00:00:99", ifindex=idx,
                  state="permanent")
    try:
        errors = readback(fabric, cloud, pods)
        assert any(e.startswith(f"{pod.ns} permanent neighbours") and "02:00:00:00:00:99" in e
                   for e in errors), errors
    finally:
        with ipr_in(pod.ns) as ipr:
            ipr.neigh("replace", dst=POD_GW, lladdr=right, ifindex=idx, state="permanent")
    assert readback(fabric, cloud, pods) == []


def test_a_vpc_route_to_the_wrong_eni_is_named(direct):
    fabric, cloud, pods = direct
    pod, _ = secondary_pod(cloud, fabric, pods)
    enis = ec2_enis(cloud, [n.instance_id for n in fabric.nodes])
    right = next(e for e in enis.values() if pod.ip in e.secondaries)
    wrong = next(e for e in enis.values() if e.instance_id == right.instance_id
                 and e.device_index == 0)
    vpc = View(fabric.vpc.name)
    right_dev = next(r.dev for r in vpc.routes if r.dst == f"{pod.ip}/32")
    wrong_dev = next(r.dev for r in vpc.routes if r.dst == f"{wrong.primary}/32")
    with ipr_in(fabric.vpc.name) as ipr:
        ipr.route("replace", dst=f"{pod.ip}/32", gateway=wrong.primary,
                  oif=ipr.link_lookup(ifname=wrong_dev)[0], flags=RTNH_F_ONLINK)
    try:
        errors = readback(fabric, cloud, pods)
        assert any(e.startswith("vpc routes to ENIs") and pod.ip in e for e in errors), errors
    finally:
        with ipr_in(fabric.vpc.name) as ipr:
            ipr.route("replace", dst=f"{pod.ip}/32", gateway=right.primary,
                      oif=ipr.link_lookup(ifname=right_dev)[0], flags=RTNH_F_ONLINK)
    assert readback(fabric, cloud, pods) == []
