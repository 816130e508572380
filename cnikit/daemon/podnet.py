"""The pod data plane for a CNI request, on top of cnikit.fabric.wiring (upstream's layout:
pod eth0 IP/32 via 169.254.1.1, host veth /32 route, rules 512 and 1536, per-ENI tables).

Runs where the node's network is the current namespace: inside the daemon (default: the
plugin process stays small) or inside the plugin (`"wiring": "plugin"` in the netconf).
"""

from __future__ import annotations

import errno
import os
import queue
import socket
import threading
import time


class PodNetError(Exception):
    """`code` is the CNI error code to answer with."""

    def __init__(self, message: str, code: int = 5):
        super().__init__(message)
        self.code = code


def _open_ns(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PodNetError(f"network namespace {path} does not exist", 3) from None
    except OSError as e:
        raise PodNetError(f"network namespace {path}: {e.strerror}", 5) from None


def veth_name(pod_namespace: str, pod_name: str, container_id: str, prefix: str = "eni") -> str:
    from cnikit.fabric import wiring

    if pod_name:
        return wiring.host_veth_name(pod_namespace or "default", pod_name, prefix)
    return wiring.host_veth_name("cni", container_id, prefix)


class PodNet:
    """background_delete: remove host veths after answering DEL (a link delete waits ~35 ms
    for an RCU grace period). Only for a long-lived process (the daemon); the IP is unrouted
    before the answer, and an ADD into the same namespace waits for its pending delete."""

    def __init__(self, eni_link_wait: float = 10.0, background_delete: bool = False):
        from cnikit.fabric.netlink import Netlink

        self.node = Netlink()
        self.eni_link_wait = eni_link_wait
        # Netns paths and veth names with a delete queued: an ADD reusing either waits.
        self._pending: dict[str, int] = {}
        self._cond = threading.Condition()
        self._queue: queue.Queue | None = None
        if background_delete:
            self._queue = queue.Queue()
            self._reaper_nl = Netlink()  # its own socket: a delete holds it for the RCU wait
            threading.Thread(target=self._reap, name="veth-reaper", daemon=True).start()

    def _reap(self) -> None:
        while True:
            keys, index = self._queue.get()
            try:
                # By index, not name: a pod of the same name may own that name again by now.
                self._reaper_nl.link_del(index=index)
            except OSError:
                pass  # gone with its namespace already
            finally:
                with self._cond:
                    for k in keys:
                        self._pending[k] -= 1
                        if not self._pending[k]:
                            del self._pending[k]
                    self._cond.notify_all()

    def _wait_pending(self, *keys: str, timeout: float = 10.0) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not any(k in self._pending for k in keys), timeout)

    def _wait_eni_link(self, device_index: int) -> None:
        # The fabric (or a real kernel) shows a just-attached ENI as eth<N> a moment later,
        # and up a moment after that: a route via a link still down fails "network is down",
        # so an ADD racing an attach waits for both, then asks the runtime to try again.
        deadline = time.monotonic() + self.eni_link_wait
        while not ((link := self.node.link(f"eth{device_index}")) is not None and link.up):
            if time.monotonic() > deadline:
                state = "never appeared" if link is None else "never came up"
                raise PodNetError(f"eth{device_index} (ENI device {device_index}) {state}", 11)
            time.sleep(0.01)

    def add(self, netns_path: str, ip: str, host_veth: str, ifname: str, device_index: int,
            router: str, mtu: int | None = None) -> dict:
        from cnikit.fabric import wiring
        from cnikit.fabric.netlink import NetlinkError

        self._wait_pending(netns_path, host_veth)
        fd = _open_ns(netns_path)
        pod = None
        try:
            pod = wiring.netlink_in(fd)
            if device_index:
                self._wait_eni_link(device_index)
            try:
                w = wiring.wire(self.node, pod, fd, ip, host_veth, ifname=ifname,
                                device_index=device_index, router=router or None, mtu=mtu)
            except NetlinkError as e:
                raise PodNetError(f"wiring {ip} into {netns_path}: {e}", 5) from None
            return {"hostVeth": w.host_veth, "hostMac": w.host_mac, "podMac": w.pod_mac}
        finally:
            if pod is not None:
                pod.close()
            os.close(fd)

    def add_egress(self, netns_path: str, ip: str, host_veth: str, egress_range: str,
                   replace_stale: bool) -> dict:
        """The IPv6 pod's IPv4 egress (cnikit.fabric.egress): its v4if0 holding `ip`."""
        from cnikit.fabric import egress, wiring
        from cnikit.fabric.netlink import NetlinkError

        fd = _open_ns(netns_path)
        pod = None
        try:
            pod = wiring.netlink_in(fd)
            if egress.pod_egress_ip(pod) == ip:
                return {"egressIp": ip}  # a repeated ADD: already there
            try:
                egress.wire(self.node, pod, fd, ip, host_veth, egress_range, replace_stale)
            except NetlinkError as e:
                raise PodNetError(f"IPv4 egress {ip} into {netns_path}: {e}", 5) from None
            return {"egressIp": ip}
        finally:
            if pod is not None:
                pod.close()
            os.close(fd)

    def delete(self, netns_path: str | None, ip: str | None, host_veth: str,
               device_index: int | None) -> None:
        """Tolerates everything already gone. The veth (and so the pod's interface) is deleted
        too, as ptp's DEL does; in the background when this PodNet has a reaper."""
        from cnikit.fabric import wiring
        from cnikit.fabric.netlink import NetlinkError

        later = self._queue is not None and bool(netns_path) and os.path.exists(netns_path)
        if not ip:
            # The daemon forgot this sandbox (a lost checkpoint, a force-removed IP): its host
            # route still names the IP, so the rules can be found and removed all the same.
            hidx = self.node.link_index(host_veth)
            if hidx is not None:
                routes = self.node.routes() + self.node.routes(family=socket.AF_INET6)
                ip = next((r.dst.split("/")[0] for r in routes
                           if r.oif == hidx and r.dst.endswith(("/32", "/128"))), None)
        try:
            if ip:
                wiring.unwire(self.node, ip, host_veth, device_index, delete_link=not later)
            elif not later:
                self.node.link_del(name=host_veth)
        except NetlinkError as e:
            if e.errno not in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
                raise PodNetError(f"unwiring {ip}: {e}", 5) from None
        index = self.node.link_index(host_veth) if later else None
        if index is not None:
            keys = (netns_path, host_veth)
            with self._cond:
                for k in keys:
                    self._pending[k] = self._pending.get(k, 0) + 1
            self._queue.put((keys, index))

    def wired(self, netns_path: str, ip: str, host_veth: str, ifname: str) -> dict | None:
        """The answer an ADD gave (add's dict) when the pod's network is already as that ADD
        left it with `ip`, else None: a repeated ADD of the same sandbox answers it again
        instead of tearing the pod's interface down and making it anew (the pod would be
        dark meanwhile)."""
        try:
            view, problem = self._check(netns_path, ip, host_veth, ifname)
        except (OSError, PodNetError):
            return None  # no such pod yet: ADD wires it (and answers what is wrong)
        host = self.node.link(host_veth)
        if problem or host is None:
            return None
        return {"hostVeth": host_veth, "hostMac": host.mac, "podMac": view["mac"]}

    def check(self, netns_path: str, ip: str, host_veth: str, ifname: str) -> str | None:
        """None when the pod's network is as ADD left it, else what is wrong (one line)."""
        return self._check(netns_path, ip, host_veth, ifname)[1]

    def _check(self, netns_path: str, ip: str, host_veth: str,
               ifname: str) -> tuple[dict, str | None]:
        view = self._view(netns_path, ifname)
        return view, self._problem(view, netns_path, ip, host_veth, ifname)

    def _view(self, netns_path: str, ifname: str) -> dict:
        from cnikit.fabric import wiring

        fd = _open_ns(netns_path)
        pod = None
        try:
            pod = wiring.netlink_in(fd)
            return wiring.pod_view(pod, ifname)
        finally:
            if pod is not None:
                pod.close()
            os.close(fd)

    def _problem(self, view: dict, netns_path: str, ip: str, host_veth: str,
                 ifname: str) -> str | None:
        from cnikit.fabric import wiring

        if not view["present"]:
            return f"{ifname} is missing in {netns_path}"
        held = wiring.host_route(ip)
        if held not in view["ips"]:
            return f"{ifname} does not hold {held} (has {', '.join(view['ips']) or 'nothing'})"
        gateway = wiring.POD_GATEWAY6 if ":" in ip else wiring.POD_GATEWAY
        if view["gateway"] != gateway:
            return f"default route is via {view['gateway']}, not {gateway}"
        hidx = self.node.link_index(host_veth)
        if hidx is None:
            return f"host veth {host_veth} is missing"
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        if not any(r.dst == held and r.oif == hidx for r in self.node.routes(family=family)):
            return f"no host route {held} dev {host_veth}"
        return None
