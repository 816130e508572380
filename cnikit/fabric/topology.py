"""The VPC in network namespaces: a router namespace, one namespace per EC2 instance, pods.

    fabric = Fabric(cloud, topo, run).start()      # or `with Fabric(...) as fabric:`
    pod = fabric.add_pod(0, "10.0.1.37")           # wired directly (cnikit.fabric.wiring)
    pod = fabric.add_pod_cni(1, conf, cni_path)    # by a CNI plugin, executed as a runtime does
    fabric.delete_pod(pod)
    fabric.close()

`vpc` namespace: ip_forward=1 and strict rp_filter (EC2's source/dest check). It holds on
`lo` the subnet routers' addresses, the IMDS (169.254.169.254:80), the EC2 gate
(GATE_ADDR:80, see names.py) and the cluster's object store (STORE_ADDR:80); each ENI
link's VPC end routes the ENI's primary IP, and a sync thread keeps
`ip/32 via <ENI primary> dev <link> onlink` (and /28 prefixes) equal to EC2's ownership. Node namespaces see ENIs as `eth<deviceIndex>` holding the ENI's primary
IP (subnet prefix length, no prefix route: all traffic goes to the router, whose MAC is a
permanent neighbour) and MAC; eth0 carries the default route via the subnet router.

IPv6 (a dual-stack VPC): the vpc namespace forwards IPv6 and drops what fails a strict
reverse-path check (ip6tables rpfilter: IPv6 has no rp_filter sysctl), and answers the
IMDS's IPv6 endpoint [fd00:ec2::254]:80. Every ENI link carries the link-locals
routes.ROUTER_LL / NODE_LL (permanent neighbours both ways); a node's eth<N> holds the
ENI's first IPv6 address as /128, eth0 the IPv6 default route via ROUTER_LL; the sync
thread keeps `addr/128` and `/80 via NODE_LL dev <link>` equal to EC2's ownership.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

from cnikit import reaper
from cnikit.fabric import cleanup, names, netns, routes, wiring
from cnikit.fabric.netlink import Netlink, NetlinkError
from cnikit.runtime import Run, require_root, require_tool

log = logging.getLogger(__name__)


class Namespace:
    """A namespace the kit made, with its fd and its netlink socket (kept open)."""

    def __init__(self, name: str):
        self.name = name
        with netns.created(name) as fd:
            self.fd = fd
            self.nl = Netlink()

    @property
    def path(self) -> str:
        return str(netns.netns_path(self.name))

    def close(self, remove: bool = True) -> None:
        with contextlib.suppress(OSError):
            self.nl.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if remove:
            netns.remove(self.name)


@dataclass
class EniLink:
    spec: routes.EniLinkSpec
    vpc_link: str
    vpc_index: int
    vpc_mac: str


@dataclass
class Node:
    index: int
    instance_id: str
    ns: Namespace
    links: dict[int, EniLink] = field(default_factory=dict)  # device index -> link
    next_pod: int = 0
    tables: set[int] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.ns.name

    @property
    def primary_ip(self) -> str | None:
        link = self.links.get(0)
        return link.spec.primary_ip if link else None


@dataclass
class Pod:
    name: str
    node: Node
    ip: str
    ns: Namespace
    device_index: int
    host_veth: str | None = None
    cni: object | None = None  # cnikit.fabric.cni.CniSandbox when wired by a plugin

    @property
    def path(self) -> str:
        return self.ns.path


def _mac_for(name: str) -> str:
    d = hashlib.sha1(name.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in d[:5])


class Fabric:
    def __init__(self, cloud, topo, run: Run | None = None, imds=None, sync: bool = True,
                 store=None):
        require_root("the fabric")
        self.cloud = cloud
        self.topo = topo
        self._own_run = run is None
        self.run = run or Run.claim()
        reaper.ensure()  # removes the run should this process die before close() does
        self.rid = self.run.run_id
        self.imds = imds
        self.store = store  # the cluster's object store (cnikit.kube.KubeApi), if any
        self._sync_enabled = sync
        self.vpc: Namespace | None = None
        self.nodes: list[Node] = []
        self.pods: dict[str, Pod] = {}
        self._instance_to_node = {i.instance_id: n for n, i in enumerate(topo.instances)}
        self._subnets: dict[str, str] = {topo.subnet_id: topo.subnet_cidr}
        self.ipv6 = bool(getattr(topo, "subnet_ipv6_cidr", None))  # a dual-stack VPC
        self._routers: set[str] = set()
        self._links_by_eni: dict[str, EniLink] = {}
        self._routes: dict[str, str] = {}  # cidr -> eni_id installed in the vpc namespace
        self._lock = threading.RLock()
        self._synced = threading.Condition(self._lock)
        self.snapshot = None
        self.version = -1
        self.sync_errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: list[socket.socket] = []
        self.router = routes.router_of(topo.subnet_cidr)
        # observer(event, pod) with event "add" (after wiring) or "delete" (before unwiring):
        # how the checkers learn about pods, whoever makes them.
        self.observers: list = []

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Fabric:
        try:
            cleanup.remove_dead_runs()
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Fabric:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def ec2_endpoint(self) -> str:
        """The EC2 endpoint as seen from inside the VPC (node and pod namespaces)."""
        return names.url(names.GATE_ADDR, names.GATE_PORT)

    @property
    def imds_endpoint(self) -> str:
        return f"http://{names.IMDS_ADDR}"

    @property
    def store_endpoint(self) -> str:
        """The cluster's object store as seen from inside the VPC."""
        return names.url(names.STORE_ADDR, names.STORE_PORT)

    @property
    def imds_endpoint6(self) -> str | None:
        """The IMDS's IPv6 endpoint inside the VPC, in a dual-stack VPC."""
        return f"http://[{names.IMDS_ADDR6}]" if self.ipv6 else None

    def _build(self) -> None:
        self.vpc = Namespace(names.vpc_ns(self.rid))
        v = self.vpc
        netns.write_sysctl(v.fd, "net.ipv4.ip_forward", "1")
        netns.write_sysctl(v.fd, "net.ipv4.conf.all.rp_filter", "1")
        netns.write_sysctl(v.fd, "net.ipv4.conf.default.rp_filter", "1")
        v.nl.link_set(name="lo", up=True)
        lo = v.nl.link_index("lo")
        for addr in (names.IMDS_ADDR, names.GATE_ADDR, names.STORE_ADDR):
            v.nl.addr_add(lo, addr, 32)
        if self.ipv6:
            netns.write_sysctl(v.fd, "net.ipv6.conf.all.forwarding", "1")
            v.nl.addr_add(lo, names.IMDS_ADDR6, 128)
            self._source_check_ipv6()
        self._add_router(self.topo.subnet_cidr)
        for n, inst in enumerate(self.topo.instances):
            ns = Namespace(names.node_ns(self.rid, n))
            netns.write_sysctl(ns.fd, "net.ipv4.ip_forward", "1")
            if self.ipv6:
                netns.write_sysctl(ns.fd, "net.ipv6.conf.all.forwarding", "1")
            ns.nl.link_set(name="lo", up=True)
            self.nodes.append(Node(n, inst.instance_id, ns))
        self._listen()
        self.apply(self.cloud.gate.owners())
        if self._sync_enabled:
            self._thread = threading.Thread(target=self._sync_loop, name=f"fabric-sync-{self.rid}",
                                            daemon=True)
            self._thread.start()

    def _add_router(self, cidr: str) -> str:
        router = routes.router_of(cidr)
        if router not in self._routers:
            self.vpc.nl.addr_add(self.vpc.nl.link_index("lo"), router, 32)
            self._routers.add(router)
        return router

    def _source_check_ipv6(self) -> None:
        """EC2's source/dest check for IPv6: a packet whose source the VPC would not route
        back out of the link it came in on is dropped (strict reverse path, as rp_filter=1
        does for IPv4)."""
        require_tool("ip6tables")
        r = subprocess.run(["nsenter", f"--net={self.vpc.path}", "ip6tables", "-w", "-t",
                            "raw", "-A", "PREROUTING", "-m", "rpfilter", "--invert", "-j",
                            "DROP"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise NetlinkError(1, "the IPv6 source check (ip6tables rpfilter) could not be "
                                  f"set: {r.stderr.strip()}")

    def _listen(self) -> None:
        """Sockets made inside the vpc namespace, served by the in-process IMDS, gate and
        object store."""
        targets = [(names.GATE_ADDR, names.GATE_PORT, self.cloud.gate)]
        if self.imds is not None:
            targets.append((names.IMDS_ADDR, names.IMDS_PORT, self.imds))
            if self.ipv6:
                targets.append((names.IMDS_ADDR6, names.IMDS_PORT, self.imds))
        if self.store is not None:
            targets.append((names.STORE_ADDR, names.STORE_PORT, self.store))
        for addr, port, server in targets:
            with netns.entered(self.vpc.fd):
                s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET,
                                  socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(256)
            self._listeners.append(s)
            server.add_listener(s)

    def close(self) -> None:
        """Remove everything this fabric made. Safe to call twice, and after a failed start."""
        self._stop.set()
        # No join: the sync thread may sit in a long-poll for up to half a second. Taking
        # the lock waits out an apply in progress; after it the thread only sees _stop.
        with self._lock:
            self._thread = None
        # The servers own the listening sockets now (their stop() closes them): closing one
        # under a running event loop would leave a stale fd in its selector.
        self._listeners.clear()
        cleanup.kill_recorded(self.run.dir)
        # Anything else still running inside our namespaces (a daemon nobody recorded, what a
        # cluster component in the vpc namespace forked out of its group).
        ours = [n.name for n in self.nodes] + [p.name for p in self.pods.values()] \
            + ([self.vpc.name] if self.vpc is not None else [])
        cleanup.kill_pids(cleanup.processes_in(ours))
        for pod in list(self.pods.values()):
            if pod.cni is not None:
                with contextlib.suppress(Exception):
                    pod.cni.delete()
            pod.ns.close()
        self.pods.clear()
        for node in self.nodes:
            node.ns.close()
        self.nodes.clear()
        if self.vpc is not None:
            self.vpc.close()
            self.vpc = None
        # Anything created under our name but not tracked (an interrupted create).
        for name in netns.names(f"ck-{self.rid}-"):
            netns.remove(name)
        if self._own_run:
            self.run.close()

    # -- EC2 -> fabric -------------------------------------------------------------------

    def _sync_loop(self) -> None:
        failed = False
        while not self._stop.is_set():
            if failed:
                self._stop.wait(0.05)  # a failing apply is retried, not spun on
            try:
                snap = self.cloud.gate.wait_change(self.version, 0.5)
            except Exception as e:  # the gate stopping under us ends the loop quietly
                if self._stop.is_set():
                    return
                self.sync_errors.append(f"wait_change: {e}")
                self._stop.wait(0.1)
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                if snap is None or snap.version == self.version:
                    continue
                try:
                    self.apply(snap)
                    failed = False
                except Exception as e:
                    log.exception("fabric sync failed")
                    self.sync_errors.append(f"apply v{snap.version}: {e}")
                    failed = True

    def apply(self, snap) -> None:
        """Make links and vpc routes match one ownership snapshot."""
        with self._lock:
            want = routes.desired_links(snap, self._instance_to_node)
            for eni_id, link in list(self._links_by_eni.items()):
                if want.get(eni_id) != link.spec:
                    self._remove_link(link)
            failed = []
            for eni_id, spec in want.items():
                if eni_id not in self._links_by_eni:
                    try:
                        self._add_link(spec)
                    except (OSError, KeyError) as e:  # the other ENIs still get their links
                        failed.append(f"{eni_id}: {e}")
            desired = routes.desired_routes(snap, self._links_by_eni)
            put, gone = routes.diff(self._routes, desired)
            for cidr in gone:
                self.vpc.nl.route_del(cidr)
                del self._routes[cidr]
            for cidr, eni_id in put.items():
                link = self._links_by_eni[eni_id]
                if ":" in cidr:
                    self.vpc.nl.route_replace(cidr, gateway=routes.NODE_LL, oif=link.vpc_index)
                else:
                    self.vpc.nl.route_replace(cidr, gateway=link.spec.primary_ip,
                                              oif=link.vpc_index, onlink=True)
                self._routes[cidr] = eni_id
            self.snapshot = snap
            if failed:
                raise RuntimeError("ENI links not made: " + "; ".join(failed))
            self.version = snap.version
            self._synced.notify_all()

    def wait_synced(self, version: int, timeout: float = 5.0) -> bool:
        """Wait until the fabric applied an EC2 snapshot at least this recent."""
        end = time.monotonic() + timeout
        with self._synced:
            while self.version < version:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._synced.wait(left)
        return True

    def _subnet_cidr(self, subnet_id: str) -> str:
        if subnet_id not in self._subnets:
            resp = self.cloud.client().describe_subnets(SubnetIds=[subnet_id])
            self._subnets[subnet_id] = resp["Subnets"][0]["CidrBlock"]
        return self._subnets[subnet_id]

    def _add_link(self, spec: routes.EniLinkSpec) -> None:
        node = self.nodes[spec.node]
        vpc_name = names.vpc_link(self.rid, spec.node, spec.device_index)
        vpc_mac = _mac_for(vpc_name)
        ifname = f"eth{spec.device_index}"
        v, n = self.vpc.nl, node.ns.nl
        # A VPC-side index no node-side link has (see Netlink.veth_add).
        v.veth_add(vpc_name, ifname, peer_ns_fd=node.ns.fd, mac=vpc_mac, peer_mac=spec.mac,
                   index=1000 + spec.node * 16 + spec.device_index)
        try:
            vidx = v.link_index(vpc_name)
            nidx = n.link_index(ifname)
            n.link_set(nidx, up=True, no_ipv6_ll=True)
            v.link_set(vidx, up=True, no_ipv6_ll=True)
            if spec.primary_ip:  # an ENI of an IPv6-only subnet has no IPv4 side
                cidr = self._subnet_cidr(spec.subnet_id)
                router = self._add_router(cidr)
                plen = ipaddress.ip_network(cidr, strict=False).prefixlen
                n.addr_add(nidx, spec.primary_ip, plen, noprefixroute=True)
                n.neigh_replace(nidx, router, vpc_mac)
                if spec.device_index == 0:
                    n.route_replace("default", gateway=router, oif=nidx, onlink=True)
                v.route_replace(f"{spec.primary_ip}/32", oif=vidx)
                v.neigh_replace(vidx, spec.primary_ip, spec.mac)
            if self.ipv6:
                self._link_ipv6(spec, n, nidx, v, vidx, vpc_mac)
            if not (n.wait_oper_up(ifname) and v.wait_oper_up(vpc_name)):
                raise NetlinkError(110, f"ENI link {vpc_name}/{ifname} did not come up")
        except BaseException:
            v.link_del(name=vpc_name)
            raise
        link = EniLink(spec, vpc_name, vidx, vpc_mac)
        node.links[spec.device_index] = link
        self._links_by_eni[spec.eni_id] = link

    @staticmethod
    def _link_ipv6(spec: routes.EniLinkSpec, n: Netlink, nidx: int, v: Netlink, vidx: int,
                   vpc_mac: str) -> None:
        """The IPv6 side of an ENI link: link-locals and permanent neighbours both ways (no
        neighbour discovery on thousands of links), the ENI's address on the node end, and
        on eth0 the node's IPv6 default route."""
        n.addr_add(nidx, routes.NODE_LL, 64)
        v.addr_add(vidx, routes.ROUTER_LL, 64)
        n.neigh_replace(nidx, routes.ROUTER_LL, vpc_mac)
        v.neigh_replace(vidx, routes.NODE_LL, spec.mac)
        if spec.ipv6:
            n.addr_add(nidx, spec.ipv6, 128)
        if spec.device_index == 0:
            n.route_replace("::/0", gateway=routes.ROUTER_LL, oif=nidx)

    def _remove_link(self, link: EniLink) -> None:
        node = self.nodes[link.spec.node]
        self.vpc.nl.link_del(name=link.vpc_link)  # the kernel drops routes through it
        node.links.pop(link.spec.device_index, None)
        node.tables.discard(link.spec.device_index)
        self._links_by_eni.pop(link.spec.eni_id, None)
        for cidr in [c for c, e in self._routes.items() if e == link.spec.eni_id]:
            del self._routes[cidr]

    # -- pods ----------------------------------------------------------------------------

    def node(self, ref: int | str | Node) -> Node:
        if isinstance(ref, Node):
            return ref
        if isinstance(ref, int):
            return self.nodes[ref]
        for node in self.nodes:
            if ref in (node.instance_id, node.name):
                return node
        raise KeyError(ref)

    def device_index_of(self, node: Node, ip: str) -> int | None:
        """Which of the node's ENIs EC2 says holds ip (or a prefix containing it)."""
        snap = self.snapshot
        owner = snap.ips.get(ip) if snap else None
        if owner is None and snap is not None:
            addr = ipaddress.ip_address(ip)
            for prefix, o in snap.prefixes.items():
                if addr in ipaddress.ip_network(prefix, strict=False):
                    owner = o
                    break
        if owner is None or owner.instance_id != node.instance_id:
            return None
        return owner.device_index

    def _new_pod_ns(self, node: Node) -> tuple[str, Namespace]:
        with self._lock:
            j = node.next_pod
            node.next_pod += 1
        name = names.pod_ns(self.rid, node.index, j)
        return name, Namespace(name)

    def add_pod(self, node: int | str | Node, ip: str, device_index: int | None = None) -> Pod:
        """A pod namespace wired directly (same data plane as the plugin).

        device_index defaults to the ENI of this node that EC2 says holds ip, else 0.
        """
        node = self.node(node)
        if device_index is None:
            device_index = self.device_index_of(node, ip) or 0
        name, ns = self._new_pod_ns(node)
        try:
            veth = wiring.host_veth_name(ns.path, name)
            if device_index and device_index not in node.tables:
                link = node.links.get(device_index)
                router = (routes.router_of(self._subnet_cidr(link.spec.subnet_id)) if link
                          else self.router)
                wiring.setup_eni_table(node.ns.nl, device_index, router)
                node.tables.add(device_index)
            wiring.wire(node.ns.nl, ns.nl, ns.fd, ip, veth, device_index=device_index)
        except BaseException:
            ns.close()
            raise
        pod = Pod(name, node, ip, ns, device_index, host_veth=veth)
        self.pods[name] = pod
        self._notify("add", pod)
        return pod

    def add_pod_cni(self, node: int | str | Node, config: dict, cni_path: list[str] | str,
                    args: dict | None = None, ifname: str = "eth0",
                    timeout: float = 30.0, env: dict[str, str] | None = None) -> Pod:
        """A pod namespace handed to a CNI plugin exactly as a container runtime does (`env`:
        the runtime's environment under the CNI_* variables; default this process's)."""
        from cnikit.fabric import cni

        node = self.node(node)
        name, ns = self._new_pod_ns(node)
        if args and "K8S_POD_NAME" in args:  # kubelet names the sandbox to a pod's plugins
            args = {**args, "K8S_POD_INFRA_CONTAINER_ID": name}
        sandbox = cni.CniSandbox(config, cni_path, container_id=name, netns_path=ns.path,
                                 ifname=ifname, args=args, timeout=timeout,
                                 runner_ns=node.ns.path, run_dir=self.run.dir, env=env)
        try:
            result = sandbox.add(pod_nl=ns.nl)
        except BaseException:
            with contextlib.suppress(Exception):
                sandbox.delete()
            ns.close()
            raise
        ip = result.ips[0].split("/")[0]
        pod = Pod(name, node, ip, ns, self.device_index_of(node, ip) or 0, cni=sandbox)
        self.pods[name] = pod
        self._notify("add", pod)
        return pod

    def _notify(self, event: str, pod: Pod) -> None:
        for fn in list(self.observers):
            fn(event, pod)

    def del_in_flight(self, pod: Pod, done: bool) -> None:
        """A DEL the runtime sends for a pod it keeps until the DEL succeeds (a retry):
        `done` False before it is sent, True once it failed and the pod stays. Observers
        stop judging the pod's data plane meanwhile, since a DEL that succeeds tears it
        down before the runtime removes the sandbox (events "deleting" and "kept")."""
        self._notify("kept" if done else "deleting", pod)

    def delete_pod(self, pod: Pod | str, netns_path: str | None = None,
                   send_del: bool = True) -> None:
        """DEL (plugin pods) or unwire (direct pods), then remove the namespace.
        `netns_path`: the CNI_NETNS the DEL is given ("" as a runtime that lost it sends);
        `send_del` False: a plugin pod whose DEL the runtime has already sent."""
        pod = self.pods[pod if isinstance(pod, str) else pod.name]
        try:
            self._notify("delete", pod)
        finally:
            del self.pods[pod.name]
        try:
            if pod.cni is not None:
                if send_del:
                    pod.cni.delete(netns_path)
            else:
                with contextlib.suppress(NetlinkError):
                    wiring.unwire(pod.node.ns.nl, pod.ip, pod.host_veth, pod.device_index,
                                  delete_link=False)
        finally:
            pod.ns.close()
