"""The nodes' policy routing as the kernel holds it, recorded for the `host-route` checker.

Whatever build runs on a node, what its pods' packets do on the node is decided by the
node namespace's rules and route tables: these are read with netlink dumps inside each
node namespace (never from the build), and recorded as a monitor `host-net` entry per node
whenever they change:

    {node, instance_id,
     enis:   {ifname: eni_id}               the node's ENI interfaces (the fabric's links)
     rules:  [[priority, src, dst, table]]  rules naming an address (not the kernel's own)
     routes: [[table, dst, ifname, gateway]] every table but main and local; of main, its
                                            host routes (/32, /128) and default routes}
"""

from __future__ import annotations

import socket
import threading

from cnikit.check.history import MONITOR, History
from cnikit.fabric.netlink import Netlink

HOST_NET = "host-net"
FAMILIES = (socket.AF_INET, socket.AF_INET6)
_LOCAL, _MAIN = 255, 254


def dump(nl: Netlink, enis: dict[str, str]) -> dict:
    """One node's rules and routes, in the entry's shape (module docstring)."""
    names = {link.index: link.name for link in nl.links()}
    rules, routes = [], []
    for family in FAMILIES:
        rules += [[r.priority, r.src, r.dst, r.table] for r in nl.rules(family)
                  if r.src or r.dst]
        for r in nl.routes(table=None, family=family):
            if r.table == _LOCAL:
                continue
            if r.table == _MAIN and r.dst not in ("default", "::/0") and not r.dst.endswith(
                    ("/32", "/128")):
                continue
            routes.append([r.table, r.dst, names.get(r.oif), r.gateway])
    return {"enis": dict(enis), "rules": sorted(rules, key=str),
            "routes": sorted(routes, key=str)}


class HostNetSampler:
    """Dumps every node's rules and routes each `interval` seconds into the history.

    Once a second: the checker judges only what lasts twice the leak grace, and four dumps
    a second cost a quiet two-node run 2.4 ms of CPU per second, a tenth of all it used."""

    def __init__(self, fabric, history: History, interval: float = 1.0):
        self.fabric, self.history, self.interval = fabric, history, interval
        self._last: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HostNetSampler:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="host-net", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except OSError:
                if self._stop.is_set():
                    return  # the fabric closed under the last dump
                raise

    def sample(self) -> None:
        for node in list(self.fabric.nodes):
            enis = {f"eth{d}": link.spec.eni_id for d, link in list(node.links.items())}
            value = dump(node.ns.nl, enis)
            if self._last.get(node.index) != value:
                self._last[node.index] = value
                self.history.info(MONITOR, HOST_NET, {"node": node.index,
                                                      "instance_id": node.instance_id,
                                                      **value})
