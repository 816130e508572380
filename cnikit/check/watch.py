"""Watching a fabric: the prober (client), the monitor, the history and the invariants.

    with Watch(fabric, cluster.history) as watch:   # tracks every pod the fabric makes or deletes
        cluster.nemesis.unassign(ip)                # faults: cnikit.cluster.nemesis
        watch.wait_for(lambda inv: pod.name in inv.failing_pods(), timeout=1)
    watch.invariants.violations(); watch.history.dump(path)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from cnikit.check.egress_probe import EgressProbe
from cnikit.check.history import CLIENT, MONITOR, PROBER, History
from cnikit.check.hostnet import HostNetSampler
from cnikit.check.invariants import Invariants
from cnikit.check.monitor import Monitor
from cnikit.check.prober import ANCHOR_PREFIX, Prober, ProbeTarget

UPSTREAM_IP_COOLDOWN = 30.0  # IP_COOLDOWN_PERIOD's default: the cooldown builds are held to


def required_ip_cooldown(env: dict | None, scale: float) -> float:
    """The IP cooldown every build must keep, in run seconds: what the run's environment
    asks for (IP_COOLDOWN_PERIOD), else upstream's, times the time scale."""
    return float((env or {}).get("IP_COOLDOWN_PERIOD", UPSTREAM_IP_COOLDOWN)) * scale


# How long a new pod waits for the fabric to route EC2's state as of its ADD before it is
# probed: milliseconds on a quiet machine; the bound only keeps a stuck fabric from
# stalling the run.
FABRIC_SYNC_S = 5.0
# How long a new IPv6 pod waits for the kernel's duplicate address detection on its
# addresses and its node's: a second, up to two, when a build leaves it on; none otherwise.
DAD_S = 5.0


class Watch:
    def __init__(self, fabric, history: History | None = None, leak_grace: float = 60.0,
                 daemon_view: Callable[[str], set[str] | None] | None = None,
                 interval: float | None = None, timeout: float = 0.005, fail_after: int = 3,
                 ip_cooldown: float = 0.0, strict_leaks: bool = False):
        """ip_cooldown: the IP cooldown the build must keep, in run seconds (upstream's
        IP_COOLDOWN_PERIOD times the time scale): a deleted pod's flows linger that long,
        and one reaching a pod given its IP sooner is an `early-reuse` (0: not judged).
        strict_leaks: a leak is a violation (certification), not a warning."""
        self.fabric = fabric
        self.history = history if history is not None else History()
        self.invariants = Invariants(leak_grace, ip_cooldown=ip_cooldown,
                                     strict_leaks=strict_leaks)
        self.history.subscribe(self.invariants.step)
        self.monitor = Monitor(fabric.cloud.gate, self.history,
                               [n.instance_id for n in fabric.nodes], daemon_view)
        self.prober = Prober(self._on_probe, interval=interval, timeout=timeout,
                             fail_after=fail_after, linger=ip_cooldown, run_dir=fabric.run.dir)
        # IPv6 pods' IPv4 egress, in a dual-stack VPC (cnikit.check.egress_probe).
        self.egress = EgressProbe(fabric, self.history) if fabric.ipv6 else None
        # The nodes' rules and routes as the kernel holds them (the host-route checker).
        self.hostnet = HostNetSampler(fabric, self.history)
        self.errors: dict[str, str] = {}

    def start(self) -> Watch:
        self._record_nodes()
        self.monitor.start()
        self.prober.start()
        try:
            self.hostnet.start()
            if self.egress is not None:
                self.egress.start()
            self._add_anchor()
            pods = list(self.fabric.pods.values())
            for pod in pods:
                self._record_add(pod)
            self._probe(pods)
            self.fabric.observers.append(self._on_pod)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._on_pod in self.fabric.observers:
            self.fabric.observers.remove(self._on_pod)
        self.prober.stop()
        self.hostnet.stop()
        if self.egress is not None:
            self.egress.stop()
        self.monitor.stop()

    # -- inputs --------------------------------------------------------------------------

    def _on_probe(self, ev: dict) -> None:
        self.history.info(PROBER, ev["ev"], ev, at=ev.get("t"), mono=ev.get("m"))

    def _record_nodes(self) -> None:
        """Each node's instance and how many addresses one of its ENIs holds (the instance
        type's EC2 limit; None for a type outside the kit's table), for checkers that judge
        whether the node had room (cooldown-wait)."""
        from cnikit.check.checkers.cooldown_wait import NODES
        from cnikit.cloud.limits import FALLBACK

        nodes = {}
        for node, inst in zip(self.fabric.nodes, self.fabric.topo.instances, strict=False):
            limits = FALLBACK.get(inst.instance_type)
            nodes[node.instance_id] = {"node": node.index, "instance_type": inst.instance_type,
                                       "ipv4_per_eni": limits.ipv4_per_eni if limits else None}
        self.history.info(MONITOR, NODES, {"nodes": nodes})

    def _add_anchor(self) -> None:
        """The VPC router's subnet address as a fixed point every pod probes each round; in
        a dual-stack VPC also an IPv6 address of the VPC's namespace, for the IPv6 pods
        (a pod probes the anchors of its own family only)."""
        from cnikit.fabric import names, routes

        router = routes.router_of(self.fabric.topo.subnet_cidr)
        anchors = [ProbeTarget(f"{ANCHOR_PREFIX}vpc", self.fabric.vpc.path, router, anchor=True)]
        if self.fabric.ipv6:
            anchors.append(ProbeTarget(f"{ANCHOR_PREFIX}vpc6", self.fabric.vpc.path,
                                       names.IMDS_ADDR6, anchor=True))
        self.errors.update(self.prober.add(anchors))

    def _record_add(self, pod) -> None:
        self.history.append(CLIENT, "ok", "pod-add",
                            {"pod": pod.name, "node": pod.node.index,
                             "instance_id": pod.node.instance_id, "ip": pod.ip})

    def _probe(self, pods) -> None:
        errors = self.prober.add([ProbeTarget(p.name, p.path, p.ip) for p in pods])
        self.errors.update(errors)
        if self.egress is not None:
            for p in pods:
                try:
                    self.egress.add(p)
                except OSError as e:
                    self.errors[p.name] = f"IPv4 egress probe: {e}"

    def _settle(self, pod) -> None:
        """Wait until no IPv6 address of the pod's namespace or its node's is tentative. A
        plugin that leaves duplicate address detection on (the kernel's default in a new
        namespace) gets addresses that neither answer nor send for a second or two after
        the ADD, on the pod's side or on the node's, where a plugin such as ptp puts the
        pod's gateway: probed meanwhile, the pod would read as dark. A pod whose address
        failed DAD is not waited for: it has a duplicate, which the checkers judge."""
        if ":" not in pod.ip:
            return

        def held() -> list[str]:
            return [ip for nl in (pod.ns.nl, pod.node.ns.nl) for ip in nl.tentative()]

        tentative = held()
        if not tentative:
            return
        start = time.monotonic()
        while held() and time.monotonic() < start + DAD_S:
            time.sleep(0.01)
        # In the run's history: what the kit waited for, and how long.
        self.history.info(MONITOR, "dad-wait", {"pod": pod.name, "tentative": tentative,
                                                "waited": round(time.monotonic() - start, 3)})

    def _on_pod(self, event: str, pod) -> None:
        if event == "add":
            # The daemon may have assigned the pod's IP in EC2 a moment ago: record EC2's
            # ownership as of now first, or the checker judges the pod against older truth;
            # and let the fabric route it as EC2 now says (an address EC2 assigned is
            # reachable once the call returns), or a busy kit's late route reads as the
            # pod going dark.
            version = self.fabric.cloud.gate.owners().version
            self.monitor.wait_version(version, 1.0)
            self.fabric.wait_synced(version, FABRIC_SYNC_S)
            self._record_add(pod)
            self._settle(pod)
            self._probe([pod])
        elif event == "deleting":  # a retried DEL in flight: its success tears the pod down
            self.prober.remove([pod.name])
            if self.egress is not None:
                self.egress.remove(pod.name)
            self.history.append(CLIENT, "ok", "pod-deleting", {"pod": pod.name, "ip": pod.ip})
        elif event == "kept":  # that DEL failed and the runtime keeps the pod
            self.history.append(CLIENT, "ok", "pod-kept", {"pod": pod.name, "ip": pod.ip})
            self._probe([pod])
        elif event == "delete":
            self.prober.remove([pod.name])
            if self.egress is not None:
                self.egress.remove(pod.name)
            self.history.append(CLIENT, "ok", "pod-delete", {"pod": pod.name, "ip": pod.ip})

    # -- results -------------------------------------------------------------------------

    def verdict(self) -> dict:
        """The run's verdict: ok, violations and warnings (with timestamps), probe figures."""
        out = self.invariants.summary()
        out["pods"] = len(self.invariants.state.pods)
        out["history_entries"] = len(self.history)
        out["prober"] = {k: self.prober.last_stats.get(k) for k in
                         ("pairs_per_s", "pods", "failing", "stale_count", "timeouts")}
        out["prober_errors"] = dict(self.errors)
        return out

    def dump(self, directory: str | Path) -> Path:
        """Write history.jsonl and verdict.json into directory (made if missing)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.history.dump(d / "history.jsonl")
        (d / "verdict.json").write_text(json.dumps(self.verdict(), indent=2, default=str) + "\n")
        return d

    # -- waiting -------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[Invariants], bool], timeout: float,
                 poll: float = 0.005) -> float | None:
        """Seconds until predicate(invariants) held, or None at the deadline."""
        start = time.monotonic()
        end = start + timeout
        while True:
            if predicate(self.invariants):
                return time.monotonic() - start
            if time.monotonic() >= end:
                return None
            time.sleep(poll)

    def sync_ownership(self, timeout: float = 5.0) -> bool:
        """Wait until the monitor recorded EC2's current ownership."""
        return self.monitor.wait_version(self.fabric.cloud.gate.owners().version, timeout)
