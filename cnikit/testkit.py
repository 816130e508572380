"""What the pytest fixtures hand out, usable without pytest too.

    kit = Kit(cloud, imds_server, profile="hardened")
    c = kit.cluster(nodes=2, pods=4)        # a VPC of its own on the shared cloud, daemons up
    inv = kit.watch()                       # checkers on every cluster made, now and later
    pod = c.add_pod(0); c.unassign(pod)     # ... break something (c.nemesis: the cluster's)
    kit.nemesis.imds.stale(mac=mac)         # IMDS and EC2 faults: every cluster's history
    inv.finish(report_dir)                  # -> Verdict(ok, statement, report paths)
    kit.close()

One cloud (moto or LocalStack behind the gate) is shared by many kits: each cluster gets its
own VPC CIDR, so IP ownership never collides across tests.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cnikit.cluster import CniCluster
from cnikit.cluster.nemesis import Nemesis

# 10.<n>.0.0/16 per cluster; shared by every kit of this process.
_vpc_numbers = itertools.count()
# The monitor's default is 1 s; tests are short, and a read of the introspection port is cheap.
DAEMON_VIEW_INTERVAL = 0.25
_vpc_lock = threading.Lock()


def next_cidrs() -> tuple[str, str]:
    with _vpc_lock:
        n = 100 + next(_vpc_numbers) % 150
    return f"10.{n}.0.0/16", f"10.{n}.1.0/24"


class Cluster(CniCluster):
    """CniCluster on a cloud and fault IMDS it does not own (they outlive it)."""

    def __init__(self, cloud, imds, nodes: int = 2, profile: str | None = None,
                 instance_type: str = "m5.large", scale: float = 0.1,
                 env: dict[str, str] | None = None, target=None, ip_family: str | None = None,
                 instance_types: list[str] | None = None):
        super().__init__(nodes=nodes, profile=profile, instance_type=instance_type, scale=scale,
                         env=env, target=target, ip_family=ip_family,
                         instance_types=instance_types)
        self._shared_cloud, self._shared_imds = cloud, imds
        self.k8s_names: dict[str, str] = {}  # fabric pod name -> the name the test gave
        self._seq = itertools.count()

    def _start_cloud(self) -> None:
        """The shared cloud and IMDS; this cluster's own VPC range among theirs."""
        self.cloud, self.imds = self._shared_cloud, self._shared_imds
        vpc, subnet = next_cidrs()
        self.topo = self.cloud.bootstrap(nodes=self.n_nodes, instance_types=self.instance_types,
                                         vpc_cidr=vpc, subnet_cidr=subnet,
                                         ipv6=self.ip_family != "ipv4")

    # ---- what a test uses -------------------------------------------------------------

    @property
    def nodes(self):
        return self.fabric.nodes

    @property
    def pods(self) -> dict:
        return self.fabric.pods

    def add_pod(self, node: int = 0, name: str | None = None, namespace: str = "default",
                retry_for: float = 15.0, **conf):
        """ADD a pod through cnikit-cni on `node`; "try again later" (CNI code 11) is retried
        for up to retry_for seconds, as kubelet does. Returns the fabric Pod (.name, .ip)."""
        from cnikit.fabric.cni import CniError

        name = name or f"pod-{next(self._seq)}"
        end = time.monotonic() + retry_for
        while True:
            try:
                pod = super().add_pod(node, name, namespace, **conf)
                break
            except CniError as e:
                if e.code != 11 or time.monotonic() > end:
                    raise
                time.sleep(0.1)
        self.k8s_names[pod.name] = name
        return pod

    def unassign(self, pod) -> None:
        """Take the pod's IP away from its ENI in EC2 (through the gate), as a buggy daemon
        or an operator would: the pod should go dark. A nemesis operation."""
        self.nemesis.unassign(pod.ip)

    def daemon_ips(self, instance_id: str) -> set[str] | None:
        """The build's datastore of that node, read from outside as the scenarios read it:
        every IP and prefix on its ENIs from its [observe] introspection port (upstream's
        /v1/enis), the monitor's daemon view. None for a build that declares no such port
        (nothing is judged that needs the view); raises when the daemon does not answer
        (recorded as such)."""
        from cnikit.scenarios.blackbox import enis_view, introspect

        port = self.target.observe.introspection
        if not port:
            return None
        for node in self.fabric.nodes:
            if node.instance_id == instance_id:
                enis, _ = enis_view(introspect(node.ns.path, port))
                return {x for addrs in enis.values() for x in addrs}
        return None

    def close(self) -> None:
        # The cloud and IMDS are shared: only what this cluster made goes.
        self.close_run()


@dataclass
class Verdict:
    ok: bool
    statement: str
    violations: list[dict] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)
    # Why the machine was too slow for the time scale to judge the test (cnikit.check.stall),
    # or None: the pytest plugin then skips the test with it instead of passing or failing.
    too_slow: str | None = None


class Invariants:
    """The checkers (cnikit.check Watch) on every cluster of a kit."""

    def __init__(self, kit: Kit, leak_grace: float = 60.0):
        self.kit = kit
        self.leak_grace = leak_grace
        self.watches: dict[int, object] = {}  # id(cluster) -> Watch
        self.started = time.time()
        self.finished: Verdict | None = None
        self.stalls = None  # a StallMeter at the first cluster's time scale

    def attach(self, cluster: Cluster) -> None:
        from cnikit.check.stall import StallMeter
        from cnikit.check.watch import Watch, required_ip_cooldown

        if id(cluster) in self.watches:
            return
        if self.stalls is None:
            self.stalls = StallMeter(cluster.scale).start()
        w = Watch(cluster.fabric, cluster.history, leak_grace=self.leak_grace,
                  ip_cooldown=required_ip_cooldown(cluster.env, cluster.scale),
                  daemon_view=cluster.daemon_ips)
        w.monitor.daemon_interval = DAEMON_VIEW_INTERVAL
        w.start()
        w.sync_ownership()
        w.cluster = cluster
        self.watches[id(cluster)] = w
        self._sample_daemons(w)

    @staticmethod
    def _sample_daemons(w) -> None:
        """One daemon view of every node now (the monitor samples only every interval): the
        report then shows the datastore from the first moment to the last."""
        from cnikit.check.history import MONITOR

        for inst in sorted(w.monitor.instances):
            try:
                ips = w.cluster.daemon_ips(inst)
            except Exception as e:  # noqa: BLE001 - a daemon down is an observation
                w.history.info(MONITOR, "daemon-view-error", {"instance_id": inst, "error": str(e)})
                continue
            if ips is not None:
                w.history.info(MONITOR, "daemon-view", {"instance_id": inst, "ips": sorted(ips),
                                                        "at": time.time()})

    def detach(self, cluster: Cluster) -> None:
        w = self.watches.get(id(cluster))
        if w is not None:
            self._stop(w)

    def _stop(self, w) -> None:
        if getattr(w, "stopped", False):
            return
        w.sync_ownership(timeout=2)
        self._sample_daemons(w)
        w.stop()
        w.stopped = True

    @property
    def history(self):
        """The history of the first cluster watched (most tests make one)."""
        return next(iter(self.watches.values())).history

    def violations(self) -> list:
        return [v for w in self.watches.values() for v in w.invariants.violations()]

    def wait_for(self, predicate, timeout: float) -> float | None:
        """Seconds until predicate(cnikit.check Invariants) held on some cluster, or None."""
        end = time.monotonic() + timeout
        while True:
            for w in self.watches.values():
                if predicate(w.invariants):
                    return timeout - (end - time.monotonic())
            if time.monotonic() >= end:
                return None
            time.sleep(0.005)

    def finish(self, report_dir: Path | None, name: str = "run", always_report: bool = False) -> Verdict:
        """Stop watching, judge, write the report(s) (always, or when broken), and say what broke."""
        if self.finished is not None:
            return self.finished
        from cnikit.check.stall import run_too_slow
        from cnikit.report import build, summary, write_report

        for w in self.watches.values():
            self._stop(w)
        if self.stalls is not None:
            self.stalls.stop()
        lines, heads, all_v, reports = [], [], [], []
        watches = list(self.watches.values())
        for k, w in enumerate(watches):
            result = self.result(w, name)
            broken = bool(result["violations"])
            all_v += result["violations"]
            if report_dir is not None and (broken or always_report):
                out = Path(report_dir) if len(watches) == 1 else Path(report_dir) / f"cluster-{k}"
                reports.append(write_report(out, result))
            if broken:
                doc, tl = build(result)
                stated = _worth_stating(doc["violations"])
                lines += [summary.sentence(tl, v) for v in stated]
                heads += [_what_broke(v, doc["history"]) for v in stated]
        if lines:
            # The first line is what a test report's one-line summary shows: say what broke.
            more = f" (+{len(heads) - 3} more)" if len(heads) > 3 else ""
            statement = (f"cnikit: {'; '.join(heads[:3])}{more}\n"
                         + "\n".join(f"  - {s}" for s in lines))
            if reports:
                statement += "\n  report: " + "; ".join(str(r["html"]) for r in reports)
        else:
            statement = "every invariant held"
        unjudged = [why for w in watches for why in w.invariants.unjudged()]
        slow = run_too_slow(self.stalls, all_v, self.started, unjudged)
        if slow:
            statement = f"cnikit: {slow}" + (f"\n(what the checkers saw)\n{statement}" if lines else "")
        self.finished = Verdict(not all_v, statement, all_v, reports, too_slow=slow)
        return self.finished

    def result(self, watch, name: str) -> dict:
        inv = watch.invariants
        history = watch.history.entries()
        t0 = history[0]["time"] if history else self.started
        try:
            events = [e for e in self.kit.fault_client.events() if e.get("time", 0) >= t0 - 60]
        except Exception:  # noqa: BLE001 - the report is still worth writing without them
            events = []
        audit = [r for r in self.kit.cloud.gate.audit.to_json() if r["time"] >= t0]
        violations = [v.to_json() for v in inv.violations()]
        return {"scenario": name, "profile": self.kit.profile, "seed": None,
                "verdict": "violation" if violations else "holds",
                "seconds": time.time() - self.started, "violations": violations,
                "warnings": [v.to_json() for v in inv.warnings()], "history": history,
                "imds_events": events, "audit": audit}


def _what_broke(v: dict, history: list[dict]) -> str:
    """kind, pod and IP of a violation, in a few words."""
    from cnikit.check.checkers import checker_of

    d = v.get("detail") or {}
    if checker_of(v["kind"]).subject_names == "ip":
        return f"{v['kind']} {v['subject']} (pods {', '.join(d.get('pods') or []) or '?'})"
    ip = d.get("ip")
    if ip is None:
        ip = next((e["value"].get("ip") for e in reversed(history)
                   if e.get("f") == "pod-add" and e.get("type") == "ok"
                   and (e.get("value") or {}).get("pod") == v["subject"]), None)
    return f"{v['kind']} pod {v['subject']}" + (f" ({ip})" if ip else "")


def _worth_stating(violations: list[dict]) -> list[dict]:
    """Leave out blame that opened and closed at one instant: the reachability checker blames
    one side of the first failing pair until the next pair shows which pod is lost."""
    from cnikit.report.summary import momentary

    real = [v for v in violations if not momentary(v)]
    return real or violations


class Kit:
    """One test's clusters and checkers on a shared cloud and fault IMDS."""

    def __init__(self, cloud, imds_server, profile: str | None = None, scale: float = 0.1,
                 target=None, ip_family: str | None = None, slower: float = 1.0):
        from cnikit.targets import default_name, resolve_target

        self.cloud = cloud
        self.imds_server = imds_server
        # The shared cloud's and IMDS's faults, recorded in every cluster's history (each
        # cluster's own nemesis does its daemons).
        self.nemesis = Nemesis(lambda: [c.history for c in self.clusters],
                               imds_control=imds_server.control_url, cloud=cloud)
        self.fault_client = self.nemesis.imds
        # The build under test (a Target, a built-in name or a target file); profile= is an alias.
        self.target = resolve_target(target or profile or default_name())
        self.profile = self.target.name
        # The pods' address family of every cluster (None: the target's ip_family).
        self.ip_family = ip_family
        self.scale = scale
        # Every cluster's time scale is multiplied by this: the pytest plugin's re-run of a
        # test the machine was too slow for (cnikit.scenarios.engine.adapt).
        self.slower = slower
        self.clusters: list[Cluster] = []
        self.invariants: Invariants | None = None

    def cluster(self, nodes: int = 2, pods: int = 0, profile: str | None = None,
                instance_type: str = "m5.large", scale: float | None = None,
                env: dict[str, str] | None = None, target=None,
                ip_family: str | None = None,
                instance_types: list[str] | None = None) -> Cluster:
        if os.geteuid() != 0:
            from cnikit.errors import EnvironmentProblem

            raise EnvironmentProblem("a cnikit cluster needs root (network namespaces)")
        c = Cluster(self.cloud, self.imds_server, nodes=nodes,
                    target=target or profile or self.target, instance_type=instance_type,
                    scale=(self.scale if scale is None else scale) * self.slower, env=env,
                    ip_family=ip_family or self.ip_family,
                    instance_types=instance_types).start()
        self.nemesis.attach(c.history)  # the shared faults already in effect
        self.clusters.append(c)
        try:
            if self.invariants is not None:
                self.invariants.attach(c)
            for i in range(pods):
                c.add_pod(i % nodes)
        except BaseException:
            self._close_cluster(c)
            raise
        return c

    def watch(self, leak_grace: float = 60.0) -> Invariants:
        if self.invariants is None:
            self.invariants = Invariants(self, leak_grace)
            for c in self.clusters:
                self.invariants.attach(c)
        return self.invariants

    def _close_cluster(self, c: Cluster) -> None:
        if self.invariants is not None:
            self.invariants.detach(c)
        c.close()
        if c in self.clusters:
            self.clusters.remove(c)

    def close(self) -> None:
        from fault_imds.client import FaultClient

        for c in list(self.clusters):
            self._close_cluster(c)
        self.cloud.gate.faults.clear()
        try:
            FaultClient(self.imds_server.control_url).clear()  # teardown, not a fault
        except Exception:  # noqa: BLE001 - a stopped IMDS has no faults left
            pass
