"""Ctx's view of the build from outside and of EC2: IMDS reads, the daemon's [observe]
port, EC2's pools, and waits on them (a mixin of Ctx)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cnikit.scenarios.engine.outcomes import (
    Liveness,
    Precondition,
    ScenarioFailed,
)

if TYPE_CHECKING:
    from cnikit.scenarios.engine.ctx import Ctx


class NodeReads:
    """A node's reconcile passes from the IMDS request log: calling it reads the requests
    that came since the last call and returns the count so far; `times` holds when each
    pass ended (wall clock)."""

    def __init__(self, ctx: Ctx, node: int, since: int, attempts: bool = False):
        from cnikit.scenarios.blackbox import EniListReads

        self._ctx, self._node, self._seq = ctx, node, since
        self._reads = EniListReads(attempts)

    def __call__(self) -> int:
        new, self._seq = self._ctx.imds_requests(self._node, self._seq)
        return self._reads.feed(new)

    @property
    def times(self) -> list[float]:
        return self._reads.times


class Observe:
    """The build seen from outside (IMDS reads, its [observe] port) and EC2."""

    # -- the build, seen from outside, and EC2 ----------------------------------------------

    def instance_id(self, node: int) -> str:
        return self.fabric.nodes[node].instance_id

    def imds_requests(self, node: int, since: int = 0) -> tuple[list[dict], int]:
        """What the node asked the IMDS after `since` (a seq), and the seq to ask from next."""
        out, seq = [], since
        for _ in range(1000):  # bounded: pages of the log until it is read to its end
            page = self.imds.requests(since=seq, instance_id=self.instance_id(node), limit=5000)
            out += page["requests"]
            if page["next"] == seq or len(page["requests"]) < 5000:
                return out, page["next"]
            seq = page["next"]
        return out, seq

    def imds_mark(self) -> int:
        """The IMDS request log's position now (count a node's reads from here)."""
        return self.imds.requests(since=2**62)["next"]

    def reconcile_reads(self, node: int, since: int, attempts: bool = False) -> NodeReads:
        """A counter of the full reads of its ENI list the node made since `since`:
        reconcile passes (with `attempts`, every request for the list, answered or not)."""
        return NodeReads(self, node, since, attempts)

    def wait_reconciles(self, node: int, n: int = 1, timeout: float | None = None,
                        attempts: bool = False) -> float:
        """Wait until the node has read its whole ENI list from IMDS n more times (what any
        build that reconciles with IMDS does once a pass; `attempts`: asked for it, while
        the IMDS fails, say). Returns when (wall clock) the n-th read ended.

        A build that has not read its ENI list from IMDS at all since the run began, and
        does not within two reconcile intervals of this wait's start, has no such pass (it
        never reads IMDS, or reads it once at start): the scenario goes on (`adapt`) and this
        returns now. A build that did read it and stops: Precondition."""
        reads = self.reconcile_reads(node, self.imds_mark(), attempts)
        if not self._reads_imds(node, attempts):
            self.adapt(f"node {node} made no reconcile read of its ENI list from IMDS "
                       f"since the run began: no pass to wait for")
            return time.time()
        timeout = timeout or max(10.0, self.run_seconds(60) * (n + 2))
        read = "request(s) for" if attempts else "full read(s) of"
        self.precondition(lambda: reads() >= n, timeout,
                          f"{n} {read} node {node}'s ENI list from IMDS (reconcile passes)")
        return reads.times[n - 1]

    def _reads_imds(self, node: int, attempts: bool) -> bool:
        """Whether the node reads its ENI list from IMDS at all: a read since the run began,
        or one within two reconcile intervals (60 s upstream) from now. From now, not from
        the run's start: a wait late in a run (after a restart, say) gives a build whose
        first read comes late its two intervals too."""
        key = (node, attempts)
        if key in self._reconciling:
            return True
        ever = self.reconcile_reads(node, 0, attempts)
        window = max(3.0, self.run_seconds(120))
        try:
            self.wait_until(lambda: ever() >= 1, window, "")
        except Liveness:
            raise
        except ScenarioFailed:
            return False
        self._reconciling.add(key)
        return True

    def daemon_view(self, node: int) -> tuple[dict[str, list[str]], dict[str, str]] | None:
        """The build's own datastore from its [observe] introspection port (upstream's
        /v1/enis): (eni -> addresses, ip -> container ID); None when not declared or down."""
        from cnikit.scenarios.blackbox import enis_view

        if self.sampler is None or not self.sampler.introspection:
            return None
        try:
            return enis_view(self.sampler.view(node))
        except (OSError, ValueError):
            return None

    def pod_ips(self, node: int) -> set[str]:
        """The IPs the build gave the node's live pods (their CNI results)."""
        return {p.ip for p in self.pods_on(node) if getattr(p, "ip", None)}

    def pool(self, node: int):
        """EC2's view of the node's pool (cnikit.scenarios.blackbox.PoolView)."""
        from cnikit.scenarios.blackbox import pool_view

        return pool_view(self.node_enis(node), self.pod_ips(node), self.node_limits(node))

    def node_limits(self, node: int):
        """The node's instance type's limits (the kit's table; m5.large's figures for a type
        outside it)."""
        from cnikit.cloud.limits import FALLBACK, InstanceLimits

        return FALLBACK.get(self.type_of(node), InstanceLimits(3, 10))

    def _over_target(self, v, node: int) -> bool:
        """EC2 shows more free addresses than upstream's variables ask for (the build may
        release some after its decrease interval)."""
        env = self.env
        warm_ip = int(env.get("WARM_IP_TARGET", 0) or 0)
        if warm_ip or int(env.get("MINIMUM_IP_TARGET", 0) or 0):
            return v.free > warm_ip
        if str(env.get("ENABLE_PREFIX_DELEGATION", "")).lower() in ("1", "true", "yes"):
            return v.free_prefixes > int(env.get("WARM_PREFIX_TARGET", 1) or 0)
        per_eni = self.node_limits(node).ipv4_per_eni - 1
        return v.free >= (int(env.get("WARM_ENI_TARGET", 1) or 0) + 1) * per_eni

    def _ec2_key(self, node: int) -> tuple:
        return tuple(sorted((e.eni_id, tuple(sorted(e.ips)), tuple(sorted(e.prefixes)))
                            for e in self.node_enis(node)))

    def wait_pool_settles(self, node: int, timeout: float = 20.0) -> None:
        """Let the build's pool act after a fault (free surplus ENIs and addresses, top up):
        wait until EC2 shows the node's ENIs and addresses unchanged for a decrease interval
        and a pool pass. No target is asked for: a build whose own view went wrong may sit
        short of it. Never steady: Precondition."""
        settle = max(0.8, self.run_seconds(35))
        seen = {"key": None, "since": 0.0}

        def steady():
            key, now = self._ec2_key(node), time.monotonic()
            if key != seen["key"]:
                seen.update(key=key, since=now)
            return now - seen["since"] >= settle

        self.precondition(steady, timeout, f"node {node}'s ENIs and addresses in EC2 to stay "
                                           f"unchanged for {settle:.2f}s")

    def wait_within_targets(self, node: int, timeout: float = 15.0) -> bool:
        """Wait until EC2 shows the node's warm pool at the scenario's targets (free addresses
        = the node's secondary addresses in EC2 minus its pods' IPs) and steady: unchanged
        for two pool-manager passes, or for a decrease interval while above the targets.

        A build that keeps no warm pool is a design, not a fault: when EC2 shows the node
        below the targets and unchanged (no free address at all for a decrease interval, or
        some for three), the scenario goes on with the pods it has (`adapt`) and this
        returns False. EC2 never steady within `timeout`: Precondition."""
        from cnikit.scenarios.blackbox import warm_target_met

        quiet, settle = max(0.4, self.run_seconds(10)), max(0.8, self.run_seconds(35))
        seen = {"key": None, "since": 0.0, "view": None, "short": False}

        def steady():
            key, now = self._ec2_key(node), time.monotonic()
            if key != seen["key"]:
                seen.update(key=key, since=now)
            v = seen["view"] = self.pool(node)
            still = now - seen["since"]
            if not warm_target_met(v, self.env, self.type_of(node)):
                # A pool manager acts within a pass (5 s upstream); unchanged for much longer
                # below its targets, the build keeps none (or a smaller one): its design.
                seen["short"] = still >= (settle if v.free == 0 else 3 * settle)
                return seen["short"]
            return still >= (settle if self._over_target(v, node) else quiet)

        try:
            self.precondition(steady, timeout, f"node {node}'s addresses in EC2 to settle")
        except Precondition as e:
            v = seen["view"]
            raise Precondition(f"{e}; EC2 showed {v.free if v else '?'} free address(es) "
                               f"on {v.enis if v else '?'} ENI(s), targets "
                               f"{_targets(self.env)}") from None
        if seen["short"]:
            v = seen["view"]
            self.adapt(f"node {node} keeps no warm pool at upstream's targets "
                       f"({_targets(self.env)}): EC2 showed {v.free} free address(es) on "
                       f"{v.enis} ENI(s), unchanged; the scenario went on with the pods it has")
            return False
        return True

    def node_enis(self, node: int) -> list:
        """EC2's ENIs of a node (EniInfo, device index order), from the gate: never lagged."""
        iid = self.fabric.nodes[node].instance_id
        enis = [e for e in self.gate.owners().enis.values() if e.instance_id == iid]
        return sorted(enis, key=lambda e: e.device_index or 0)

    def ec2_eni(self, eni_id: str):
        return self.gate.owners().enis.get(eni_id)

    def wait_imds_follows(self, node: int, eni_id: str, timeout: float = 10.0) -> None:
        """Wait until IMDS serves the ENI as EC2 has it (before freezing it, say)."""
        def same():
            eni = self.ec2_eni(eni_id)
            pd = bool(eni.prefixes)
            served = self.imds_served(node, eni.mac, "ipv4-prefix" if pd else "local-ipv4s")
            return served is not None and set(served) == set(eni.prefixes if pd else eni.ips)

        self.wait_until(same, timeout, f"IMDS to follow EC2 on {eni_id}")

    def imds_served(self, node: int, mac: str, entry: str = "local-ipv4s") -> list[str] | None:
        """What the IMDS serves the node for one MAC right now (None: not served)."""
        import urllib.error
        import urllib.request

        iid = self.fabric.nodes[node].instance_id
        url = f"{self.imds_url}/latest/meta-data/network/interfaces/macs/{mac}/{entry}"
        # Marked as the kit's own read: the request log keeps it apart from the node's.
        req = urllib.request.Request(url, headers={"X-Cnikit-Instance-Id": iid,
                                                   "X-Cnikit-Observer": "1"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.read().decode().split()
        except urllib.error.HTTPError as e:
            return None if e.code == 404 else [f"<HTTP {e.code}>"]
        except OSError as e:
            return [f"<{e}>"]


def _targets(env: dict) -> str:
    keys = ("WARM_ENI_TARGET", "WARM_IP_TARGET", "MINIMUM_IP_TARGET", "WARM_PREFIX_TARGET",
            "ENABLE_PREFIX_DELEGATION", "MAX_ENI")
    return ", ".join(f"{k}={env[k]}" for k in keys if k in env) or "upstream's defaults"

