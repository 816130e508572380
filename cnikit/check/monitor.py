"""The monitor: records EC2's ownership (from the gate, never lagged) and, when a callback
is given, the daemon's view of each node, as observations in the history.

Ownership is recorded as diffs: a full map first, then what changed per version. IPv6
addresses and /80 prefixes are in the same maps as IPv4 addresses and /28s.
`loose-enis` is the set of ENIs that were attached to one of the run's instances during the
run and are now attached nowhere ("available"), each with the instance it was last on, its
MAC and addresses, and (`detaching`) those EC2 shows detaching; recorded whenever either
set changes (the `eni-leak` checker judges the first; the `leak` checker does not count a
detaching ENI's addresses as the node's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cnikit.check.history import MONITOR, History


def _owned(snap, instances: set[str]) -> tuple[dict, dict]:
    """Both families in one map of addresses and one of prefixes: every reader judges an
    IPv6 address or /80 as it judges an IPv4 address or /28 (their texts never collide)."""
    ips = {ip: [o.instance_id, o.eni_id, o.primary] for ip, o in snap.ips.items()
           if o.instance_id in instances}
    for ip, o in snap.ipv6s.items():
        if o.instance_id in instances:
            ips[ip] = [o.instance_id, o.eni_id, _is_enis_own_ipv6(snap, o.eni_id, ip)]
    prefixes = {p: [o.instance_id, o.eni_id] for p, o in snap.prefixes.items()
                if o.instance_id in instances}
    prefixes.update({p: [o.instance_id, o.eni_id] for p, o in snap.ipv6_prefixes.items()
                     if o.instance_id in instances})
    return ips, prefixes


def _is_enis_own_ipv6(snap, eni_id: str, ip: str) -> bool:
    """EC2 marks no IPv6 address primary; an ENI's first one is its own (the node's end of
    its link holds it: cnikit.fabric.routes), as the primary IPv4 address is: never a pod's,
    never a leak."""
    info = snap.enis.get(eni_id)
    return bool(info is not None and info.ipv6s and info.ipv6s[0] == ip)


class Monitor:
    def __init__(self, gate, history: History, instances: list[str],
                 daemon_view: Callable[[str], set[str] | None] | None = None,
                 daemon_interval: float = 1.0):
        self.gate = gate
        self.history = history
        self.instances = set(instances)
        self.daemon_view = daemon_view
        self.daemon_interval = daemon_interval
        self.version = -1
        self._ips: dict = {}
        self._prefixes: dict = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._recorded = threading.Condition()
        self._was_on: dict[str, str] = {}  # eni -> the run's instance it was last attached to
        self._loose: dict[str, dict] = {}
        self._leaving: dict[str, dict] = {}  # still attached, detaching (slow-attachment)

    def start(self) -> Monitor:
        self.record(self.gate.owners())
        self._threads.append(threading.Thread(target=self._ownership_loop, daemon=True,
                                              name="monitor-ownership"))
        if self.daemon_view is not None:
            self._threads.append(threading.Thread(target=self._daemon_loop, daemon=True,
                                                  name="monitor-daemon"))
        for t in self._threads:
            t.start()
        return self

    def record(self, snap) -> None:
        ips, prefixes = _owned(snap, self.instances)
        full = self.version < 0
        value = {"version": snap.version, "full": full,
                 "set": {ip: o for ip, o in ips.items() if self._ips.get(ip) != o},
                 "unset": [ip for ip in self._ips if ip not in ips],
                 "prefixes_set": {p: o for p, o in prefixes.items() if self._prefixes.get(p) != o},
                 "prefixes_unset": [p for p in self._prefixes if p not in prefixes]}
        self._ips, self._prefixes = ips, prefixes
        if full or value["set"] or value["unset"] or value["prefixes_set"] or value["prefixes_unset"]:
            self.history.info(MONITOR, "ownership", value)
        self._record_loose(snap)
        with self._recorded:
            self.version = snap.version
            self._recorded.notify_all()

    def _record_loose(self, snap) -> None:
        for eni_id, info in snap.enis.items():
            if info.instance_id in self.instances:
                self._was_on[eni_id] = info.instance_id
        loose, leaving = {}, {}
        for eni_id, inst in self._was_on.items():
            info = snap.enis.get(eni_id)
            if info is not None and info.instance_id is None:
                loose[eni_id] = {"was_on": inst, "mac": info.mac,
                                 "ips": [*info.ips, *info.ipv6s]}
            elif info is not None and info.attachment_status == "detaching":
                leaving[eni_id] = {"was_on": inst, "mac": info.mac,
                                   "ips": [*info.ips, *info.ipv6s]}
        for eni_id in [e for e in self._was_on if e not in snap.enis]:
            del self._was_on[eni_id]  # deleted: never loose again
        if loose.keys() != self._loose.keys() or leaving.keys() != self._leaving.keys():
            self.history.info(MONITOR, "loose-enis", {"enis": loose, "detaching": leaving})
        self._loose, self._leaving = loose, leaving

    def wait_version(self, version: int, timeout: float = 5.0) -> bool:
        with self._recorded:
            return self._recorded.wait_for(lambda: self.version >= version, timeout)

    def _ownership_loop(self) -> None:
        while not self._stop.is_set():
            try:
                snap = self.gate.wait_change(self.version, 0.5)
            except Exception:  # noqa: BLE001 - the gate stopping ends the loop
                if self._stop.wait(0.1):
                    return
                continue
            if snap.version != self.version:
                self.record(snap)

    def _daemon_loop(self) -> None:
        while not self._stop.wait(self.daemon_interval):
            for instance in sorted(self.instances):
                try:
                    ips = self.daemon_view(instance)
                except Exception as e:  # noqa: BLE001 - a daemon down is an observation too
                    self.history.info(MONITOR, "daemon-view-error",
                                      {"instance_id": instance, "error": str(e)})
                    continue
                if ips is not None:
                    self.history.info(MONITOR, "daemon-view",
                                      {"instance_id": instance, "ips": sorted(ips),
                                       "at": time.time()})

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
