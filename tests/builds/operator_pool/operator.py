#!/usr/bin/env python3
"""operator: the cluster's one EC2 caller in the operator-pool fixture (Cilium's ENI mode).

For every node in the store it keeps the free addresses of the node's pool between two
watermarks (LOW_WATERMARK, HIGH_WATERMARK): below the low one it assigns addresses to the
node's primary ENI, above the high one it gives one back. The pool is written into the
node's OperatorNode (spec.pool), where the node's agent hands it out; every RESYNC it is set
to what EC2 shows on the ENI (an address another actor moved away leaves the pool, one
assigned before a crash is adopted).

    operator.py [--release handshake|stale-view]

  handshake   a surplus address is marked in status.release; the agent answers "ready"
              only for an address no pod holds, and only then is it unassigned;
  stale-view  a deliberate bug, cilium/cilium#13412's class (before PR #17939): the
              surplus is picked from the operator's own copy of status.used, refreshed
              only at each resync, and unassigned at once without asking the agent.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from central.ec2 import Ec2, Ec2Error, addresses_per_eni  # noqa: E402
from central.store import Store, StoreError  # noqa: E402

log = logging.getLogger("operator")
SCALE = float(os.environ.get("CNIKIT_TIME_SCALE") or 1.0) or 1.0
RESYNC = 60.0 * SCALE  # how often each pool is set to EC2's view
TICK = 0.25
LOW = int(os.environ.get("LOW_WATERMARK") or 2)
HIGH = max(LOW, int(os.environ.get("HIGH_WATERMARK") or 4))


def by_address(ips) -> list[str]:
    return sorted(ips, key=lambda ip: int(ipaddress.ip_address(ip)))


class Operator:
    def __init__(self, stale_view: bool):
        self.stale_view = stale_view
        self.ec2, self.store = Ec2(), Store()
        self.enis: dict[str, dict] = {}  # node name -> eni, primary ip, capacity
        self.synced: dict[str, float] = {}  # node name -> when its pool last met EC2
        self.cached_used: dict[str, set[str]] = {}  # the stale-view variant's copy
        self.released: set[str] = set()  # by us: a lagging Describe showing one is stale

    def pass_once(self) -> None:
        for node in self.store.nodes():
            name = node["metadata"]["name"]
            try:
                self.tend(name, node)
            except (Ec2Error, StoreError) as e:
                log.warning("%s: %s", name, e)

    def tend(self, name: str, node: dict) -> None:
        eni = self.enis.get(name) or self._discover(name, node)
        obj = self.store.resource(name)
        if obj is None:
            self.store.create(name, {"instanceID": eni["instance"], "eni": eni["id"],
                                     "primaryIP": eni["primary"], "pool": by_address(eni["held"])})
            return
        if time.monotonic() - self.synced.get(name, float("-inf")) >= RESYNC:
            obj = self._resync(name, eni, obj)
        pool = set(obj["spec"].get("pool") or [])
        release = dict((obj.get("status") or {}).get("release") or {})
        used = self.cached_used[name] if self.stale_view else self._used(obj)
        if not self.stale_view:
            pool, release = self._answered(name, eni, pool, release)
        free = pool - used - set(release)
        if len(free) < LOW:
            room = eni["capacity"] - 1 - len(pool)
            count = min(HIGH - len(free), room)
            if count > 0:
                got = self.ec2.assign(eni["id"], count)
                self.released -= got
                log.info("%s: assigned %s", name, by_address(got))
                self.store.patch(name, {"spec": {"pool": by_address(pool | got)}})
        elif len(free) > HIGH and not release:
            surplus = by_address(free)[0]
            if self.stale_view:  # the bug: no one asked the agent whether a pod has it now
                self._unassign(eni["id"], surplus)
                self.store.patch(name, {"spec": {"pool": by_address(pool - {surplus})}})
                log.info("%s: released %s", name, surplus)
            else:
                self.store.patch(name, {"status": {"release": {surplus: "marked"}}})
                log.info("%s: marked %s for release", name, surplus)

    @staticmethod
    def _used(obj: dict) -> set[str]:
        return set((obj.get("status") or {}).get("used") or [])

    def _answered(self, name: str, eni: dict, pool: set[str], release: dict) -> tuple[set, dict]:
        """The agent's answers to our marks: a "ready" address is unassigned and leaves the
        pool and the map in one patch; a "do-not-release" one just leaves the map."""
        done: dict[str, None] = {}
        for ip, state in release.items():
            if state == "ready":
                self._unassign(eni["id"], ip)
                pool.discard(ip)
                log.info("%s: released %s (the agent's ready)", name, ip)
            elif state != "do-not-release":
                continue
            done[ip] = None
        if done:
            self.store.patch(name, {"spec": {"pool": by_address(pool)},
                                    "status": {"release": done}})
        return pool, {ip: s for ip, s in release.items() if ip not in done}

    def _unassign(self, eni_id: str, ip: str) -> None:
        self.released.add(ip)  # before the call: its answer may be lost after it happened
        self.ec2.unassign(eni_id, ip)

    def _resync(self, name: str, eni: dict, obj: dict) -> dict:
        # A Describe may lag: one that still shows what we released is not believed. One
        # that misses what we just assigned only shrinks the pool until the next resync.
        held = self.ec2.eni_addresses(eni["id"]) - self.released
        gone = {ip: None for ip in (obj.get("status") or {}).get("release") or {} if ip not in held}
        patch: dict = {"spec": {"pool": by_address(held)}}
        if gone:
            patch["status"] = {"release": gone}
        if set(obj["spec"].get("pool") or []) != held or gone:
            log.info("%s: pool set to EC2's %s", name, by_address(held))
            obj = self.store.patch(name, patch)
        self.synced[name] = time.monotonic()
        self.cached_used[name] = self._used(obj)
        return obj

    def _discover(self, name: str, node: dict) -> dict:
        instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
        eni_id, primary, held = self.ec2.primary_eni(instance)
        itype = node["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type", "")
        eni = {"instance": instance, "id": eni_id, "primary": primary, "held": held,
               "capacity": addresses_per_eni(self.ec2, itype)}
        log.info("%s: %s", name, eni)
        self.enis[name] = eni
        return eni


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", choices=("handshake", "stale-view"), default="handshake")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s operator %(levelname)s %(message)s")
    log.info("release=%s watermarks=%d..%d resync=%.2fs", args.release, LOW, HIGH, RESYNC)
    op = Operator(args.release == "stale-view")
    while True:
        began = time.monotonic()
        try:
            op.pass_once()
        except (Ec2Error, StoreError) as e:
            log.warning("pass: %s", e)
        time.sleep(max(0.0, TICK - (time.monotonic() - began)))


if __name__ == "__main__":
    sys.exit(main())
