"""The run engine: a live cluster, the watch (prober, monitor, checkers), a scenario's
clients and nemesis, and the verdict the checkers reach.

A scenario only acts and waits (on conditions, with deadlines); it never decides the
verdict. Every action lands in the history, next to what the prober and the monitor saw.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cnikit.check.history import CLIENT, MONITOR, NEMESIS, History
from cnikit.errors import UsageError

SCENARIO = "scenario"  # history process of the scenario's own step markers
DEFAULT_SCALE = 0.05  # 60 s reconcile -> 3 s, 30 s IP cooldown -> 1.5 s

# Daemon settings every scenario shares. The observe ports (61678/61679) stay on: each
# node's daemon has its own namespace, so the fixed ports do not collide.
BASE_ENV: dict[str, str] = {}


class ScenarioFailed(Exception):
    """The scenario could not drive the system where it wanted (not a verdict)."""


@dataclass
class Scenario:
    name: str
    description: str
    fn: Callable[[Ctx], None]
    why: str = ""
    nodes: int = 2
    env: dict[str, str] = field(default_factory=dict)
    duration: float | None = None  # default --duration (seconds of chaos), if it takes one
    instance_type: str = "m5.large"

    @property
    def expected(self) -> dict[str, str | None]:
        """Built-in target -> its expected verdict (the profiles declare them)."""
        from cnikit.daemon import profiles

        return {p.name: p.expected_verdict(self.name) for p in profiles.registry().values()}


REGISTRY: dict[str, Scenario] = {}


def scenario(name: str, description: str, why: str = "", nodes: int = 2,
             env: dict[str, str] | None = None, duration: float | None = None):
    """Register fn(ctx) as a named scenario (one line of description; why each profile
    reaches the verdict its profile module (cnikit.daemon.profiles) expects)."""

    def deco(fn):
        REGISTRY[name] = Scenario(name, description, fn, why, nodes, dict(env or {}), duration)
        return fn

    return deco


# ---- results --------------------------------------------------------------------------

@dataclass
class RunResult:
    scenario: str
    description: str
    profile: str  # the target's name (kept for old readers)
    seed: int
    verdict: str  # "holds" | "violation" | "inconclusive" | "error"
    expected: str | None
    seconds: float
    started: float
    target: str = ""  # the target's name
    precondition: str | None = None  # the unmet precondition when inconclusive
    exercised: bool = True  # False when inconclusive/error before the build was exercised
    imds_requests: list[dict] = field(default_factory=list)  # the IMDS's per-request log
    violations: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    imds_events: list[dict] = field(default_factory=list)
    audit: list[dict] = field(default_factory=list)  # the gate's mutating EC2 calls
    daemon_views: dict = field(default_factory=dict)  # node name -> last status
    daemon_events: dict = field(default_factory=dict)  # node name -> decisions it logged
    nodes: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    schedule: list[dict] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    error: str | None = None
    report: dict = field(default_factory=dict)  # kind -> path

    @property
    def ok(self) -> bool:
        return self.verdict == "holds"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def evidence(self, limit: int = 10) -> list[str]:
        """One line per violation: when (seconds into the run), what, which pod and IP."""
        out = []
        for v in self.violations[:limit]:
            until = "" if v.get("until") is None else f" until +{v['until'] - self.started:.2f}s"
            out.append(f"+{v['since'] - self.started:.2f}s{until} {v['kind']}: pod {v['pod'] or '-'} "
                       f"ip {v['ip'] or '-'} ({v['what']})")
        if len(self.violations) > limit:
            out.append(f"... and {len(self.violations) - limit} more")
        return out


def _describe(v: dict, pods: dict[str, dict]) -> dict:
    d = v.get("detail") or {}
    if v["kind"] == "shared-ip":
        ip, pod = v["subject"], ",".join(d.get("pods", []))
        what = f"IP held by pods {d.get('pods')} ({d.get('evidence')})"
    elif v["kind"] == "ip-not-owned":
        pod, ip = v["subject"], d.get("ip")
        what = f"EC2 assigns it to {d.get('held_by') or 'nobody'}, not the pod's node {d.get('node')}"
    elif v["kind"] == "unreachable":
        pod = v["subject"]
        ip = pods.get(pod, {}).get("ip")
        what = f"no answer from {d.get('failing_pairs')} peers"
    else:
        pod, ip, what = v["subject"], d.get("ip"), json.dumps(d, default=str)
    return {**v, "pod": pod, "ip": ip, "what": what}


# ---- the cluster, with the EC2 upstream of the user's choice ----------------------------

def make_cluster(nodes: int, target, scale: float, env: dict, seed: int, ec2: str,
                 ec2_endpoint: str | None, instance_type: str = "m5.large",
                 runtime: str | None = None):
    """A CniCluster (not started) running `target` (a Target, built-in name or file)."""
    from cnikit.daemon.cluster import CniCluster

    return CniCluster(nodes=nodes, target=target, instance_type=instance_type, scale=scale,
                      env={**BASE_ENV, **env}, imds_seed=seed, ec2=ec2, ec2_endpoint=ec2_endpoint,
                      seed=seed, runtime=runtime)


class DaemonSampler:
    """Records each node's datastore (IPs per ENI, who holds what) whenever it changes."""

    def __init__(self, cluster, history: History, interval: float = 0.2):
        self.c, self.h, self.interval = cluster, history, interval
        self._stop = threading.Event()
        self._last: dict[int, object] = {}
        self._thread = threading.Thread(target=self._loop, name="daemon-sampler", daemon=True)

    def start(self) -> DaemonSampler:
        self._thread.start()
        return self

    def sample(self, node: int) -> None:
        iid = self.c.fabric.nodes[node].instance_id
        try:
            st = self.c.status(node)
        except Exception as e:  # noqa: BLE001 - a daemon down is an observation
            if self._last.get(node) != "down":
                self._last[node] = "down"
                self.h.info(MONITOR, "daemon-view-error", {"instance_id": iid, "error": str(e)})
            return
        enis = {e: v["ips"] + v["prefixes"] for e, v in st["enis"].items()}
        held = {a["ip"]: a["containerID"] for a in st["assignments"]}
        key = (enis, held)
        if self._last.get(node) == key:
            return
        self._last[node] = key
        ips = sorted({ip for v in st["enis"].values() for ip in v["ips"]})
        self.h.info(MONITOR, "daemon-view", {"instance_id": iid, "ips": ips, "enis": enis,
                                             "assigned": held, "at": time.time()})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for n in range(self.c.n_nodes):
                if self._stop.is_set():
                    return
                self.sample(n)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ---- what a scenario sees ----------------------------------------------------------------

class Ctx:
    """Clients, nemesis and waits for one run. Times given to a scenario in upstream seconds
    go through `ctx.t()` (the run's time scale)."""

    def __init__(self, cluster, watch, seed: int, profile: str, scale: float,
                 duration: float | None, on_step: Callable | None = None):
        from fault_imds.client import FaultClient

        self.cluster = cluster
        self.fabric = cluster.fabric
        self.cloud = cluster.cloud
        self.gate = cluster.cloud.gate
        self.imds = FaultClient(cluster.imds.control_url)
        self.imds_url = cluster.imds.url
        self.watch = watch
        self.history: History = watch.history
        self.seed = seed
        self.rng = random.Random(seed)
        self.profile = profile
        self.scale = scale
        self.duration = duration
        self.on_step = on_step
        self.pods: dict[str, object] = {}  # netns name -> fabric Pod, in creation order
        self.steps: list[dict] = []
        self.schedule: list[dict] = []
        self.started = time.monotonic()
        self._seq = 0
        self.add_failures = 0

    # -- time ------------------------------------------------------------------------------

    def t(self, upstream_seconds: float) -> float:
        return upstream_seconds * self.scale

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def run_for(self, seconds: float) -> None:
        """Let the system run (faults active, daemons working) for a while, watching."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))

    def wait_until(self, pred: Callable[[], object], timeout: float, what: str,
                   poll: float = 0.05):
        end = time.monotonic() + timeout
        last = ""
        while True:
            try:
                v = pred()
            except (OSError, ValueError, KeyError) as e:  # a daemon restarting, say
                v, last = None, f" (last: {type(e).__name__}: {e})"
            if v:
                return v
            if time.monotonic() >= end:
                raise ScenarioFailed(f"timed out after {timeout:.1f}s waiting for {what}{last}")
            time.sleep(poll)

    def violated(self) -> bool:
        return bool(self.watch.invariants.violations())

    # -- narration -------------------------------------------------------------------------

    def step(self, title: str, **focus) -> None:
        """A named step of the story; the demo prints the three views here."""
        entry = {"t": round(self.elapsed(), 3), "title": title, **focus}
        self.steps.append(entry)
        self.history.info(SCENARIO, "step", entry)
        if self.on_step is not None:
            self.on_step(self, title, focus)

    # -- clients ---------------------------------------------------------------------------

    def add_pod(self, node: int, retry_for: float = 10.0, poll: float = 0.1):
        """ADD through cnikit-cni as a runtime would, retrying failures like kubelet does.
        Returns the Pod, or None when the daemon never gave an IP in time."""
        from cnikit.errors import CnikitError

        self._seq += 1
        name = f"pod-{self._seq}"
        end = time.monotonic() + retry_for
        while True:
            try:
                pod = self.cluster.add_pod(node, name)
            except CnikitError as e:
                self.history.append(CLIENT, "fail", "pod-add", {"pod": name, "node": node,
                                                                 "error": str(e)[:200]})
                if time.monotonic() >= end:
                    self.add_failures += 1
                    return None
                time.sleep(poll)
                continue
            pod.k8s_name = name
            self.pods[pod.name] = pod
            return pod

    def delete_pod(self, pod) -> None:
        self.pods.pop(pod.name, None)
        try:
            self.cluster.delete_pod(pod)
        except Exception as e:  # noqa: BLE001 - a failing DEL is recorded, the pod is gone anyway
            self.history.append(CLIENT, "fail", "pod-delete", {"pod": pod.name, "error": str(e)[:200]})

    def pods_on(self, node: int) -> list:
        return [p for p in self.pods.values() if p.node.index == node]

    # -- nemesis ---------------------------------------------------------------------------

    def imds_fault(self, kind: str, target: dict | None = None, duration: float | None = None,
                   **attrs):
        h = self.imds.add(kind, target=target, duration=duration, **attrs)
        self.history.info(NEMESIS, "imds-fault", {"id": str(h), "kind": kind, "target": target,
                                                   "duration": duration, **attrs})
        return h

    def end_imds_fault(self, handle) -> None:
        handle.remove()
        self.history.info(NEMESIS, "imds-fault-end", {"id": str(handle)})

    def ec2_fault(self, kind: str, **kw) -> str:
        fid = self.gate.faults.add(kind, **kw)
        self.history.info(NEMESIS, "ec2-fault", {"id": fid, "kind": kind, **kw})
        return fid

    def end_ec2_fault(self, fid: str) -> None:
        self.gate.faults.remove(fid)
        self.history.info(NEMESIS, "ec2-fault-end", {"id": fid})

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL) -> None:
        self.history.info(NEMESIS, "daemon-kill", {"node": node, "signal": int(sig)})
        self.cluster.kill_daemon(node, sig)

    def restart_daemon(self, node: int) -> None:
        self.history.info(NEMESIS, "daemon-restart", {"node": node})
        self.cluster.restart_daemon(node)

    def ec2_take(self, node: int, ips: list[str]) -> None:
        """Another tenant of the subnet takes these IPs (on `node`'s primary ENI)."""
        eni = self.fabric.topo.instances[node].primary_eni_id
        self.cloud.client().assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                        PrivateIpAddresses=list(ips))
        self.history.info(NEMESIS, "ec2-assign-elsewhere", {"eni": eni, "ips": list(ips)})

    # -- the daemon and EC2 ----------------------------------------------------------------

    def status(self, node: int) -> dict:
        return self.cluster.status(node)

    def reconciles(self, node: int) -> int:
        return self.status(node)["reconciles"]

    def wait_reconciles(self, node: int, n: int = 1, timeout: float | None = None) -> None:
        start = self.reconciles(node)
        timeout = timeout or max(10.0, self.t(60) * (n + 2))
        self.wait_until(lambda: self.reconciles(node) >= start + n, timeout,
                        f"{n} reconcile(s) on node {node}")

    def wait_within_targets(self, node: int, timeout: float = 15.0) -> None:
        self.wait_until(lambda: self.status(node)["withinTargets"], timeout,
                        f"node {node}'s pool within its targets")

    def daemon_ips(self, node: int) -> dict[str, list[str]]:
        """eni -> secondary IPs or prefixes in the datastore."""
        return {e: v["ips"] + v["prefixes"] for e, v in self.status(node)["enis"].items()}

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
        req = urllib.request.Request(url, headers={"X-Cnikit-Instance-Id": iid})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.read().decode().split()
        except urllib.error.HTTPError as e:
            return None if e.code == 404 else [f"<HTTP {e.code}>"]
        except OSError as e:
            return [f"<{e}>"]


# ---- running one ---------------------------------------------------------------------------

def _jsonable(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    if isinstance(x, dict):
        return x
    return getattr(x, "__dict__", str(x))


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("cnikit", "moto", "boto3", "pyroute2"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def check_profile(profile: str) -> None:
    from cnikit.daemon import profiles

    profiles.get(profile)  # a one-line UsageError when unknown


def run_scenario(sc: Scenario, target=None, seed: int = 1, ec2: str = "moto",
                 ec2_endpoint: str | None = None, report_dir: str | Path | None = None,
                 duration: float | None = None, scale: float | None = None,
                 on_step: Callable | None = None, observe: float = 1.0,
                 progress: Callable[[str], None] | None = None, runtime: str | None = None,
                 profile: str | None = None) -> RunResult:
    """Bring up the cluster, watch it, play the scenario, judge, tear everything down.
    `target`: a Target, a built-in name or a target file (default the default profile);
    `profile=` is an alias for a built-in name."""
    from cnikit.check.watch import Watch
    from cnikit.runtime import require_root, time_scale
    from cnikit.targets import default_name, resolve_target

    if target is None and profile is not None:
        check_profile(profile)
    tgt = resolve_target(target or profile or default_name())
    profile = tgt.name
    if ec2 not in ("moto", "localstack"):
        raise UsageError(f"--ec2 must be moto or localstack, not {ec2!r}")
    if duration is not None and duration <= 0:
        raise UsageError(f"--duration must be positive, got {duration}")
    require_root(f"scenario {sc.name}")
    if scale is None:
        scale = time_scale() if "CNIKIT_TIME_SCALE" in os.environ else DEFAULT_SCALE
    duration = duration if duration is not None else sc.duration
    say = progress or (lambda msg: None)
    t0, started = time.monotonic(), time.time()
    result = RunResult(sc.name, sc.description, profile, seed, "error", tgt.expected(sc.name),
                       0.0, started, target=tgt.name,
                       params={"scale": scale, "env": sc.env, "nodes": sc.nodes,
                               "duration": duration, "ec2": ec2,
                               "target": str(tgt.source) if tgt.source else tgt.name},
                       versions=_versions())
    say(f"{sc.name} [{profile}] seed {seed}: starting {sc.nodes} node(s)")
    cluster = make_cluster(sc.nodes, tgt, scale, sc.env, seed, ec2, ec2_endpoint,
                           sc.instance_type, runtime=runtime)
    history = History()
    watch = sampler = ctx = None
    try:
        cluster.start()
        watch = Watch(cluster.fabric, leak_grace=max(5.0, 60 * scale)).start()
        # The watch's own history (an empty History is falsy: Watch would not take ours).
        history = watch.history
        sampler = DaemonSampler(cluster, history).start()
        ctx = Ctx(cluster, watch, seed, profile, scale, duration, on_step)
        result.started = started = time.time()
        history.info(SCENARIO, "start", {"scenario": sc.name, "profile": profile, "seed": seed})
        say(f"{sc.name} [{profile}]: running")
        try:
            sc.fn(ctx)
            # Late effects (a route withdrawn, a probe timing out) still count.
            ctx.run_for(observe)
        except ScenarioFailed as e:
            result.error = str(e)
        except Exception as e:  # noqa: BLE001 - a broken part is reported, then torn down
            import traceback

            result.error = f"{type(e).__name__}: {e}"
            history.info(SCENARIO, "crash", {"traceback": traceback.format_exc()[-4000:]})
        if ctx.schedule:
            history.info(SCENARIO, "schedule", {"seed": seed, "operations": ctx.schedule})
        history.info(SCENARIO, "end", {"error": result.error})
        _collect(result, ctx, cluster)
    finally:
        if sampler is not None:
            sampler.stop()
        if watch is not None:
            watch.stop()
        say(f"{sc.name} [{profile}]: tearing down")
        cluster.close()
    inv = watch.invariants
    pods = {}
    for e in history.entries():
        if e["process"] == CLIENT and e["type"] == "ok" and e["f"] == "pod-add":
            pods[e["value"]["pod"]] = e["value"]
    result.violations = [_describe(v.to_json(), pods) for v in inv.violations()]
    result.warnings = [v.to_json() for v in inv.warnings()]
    result.history = history.entries()
    if result.violations:
        result.verdict = "violation"
    else:
        result.verdict = "error" if result.error else "holds"
    result.seconds = round(time.monotonic() - t0, 2)
    if report_dir is not None:
        result.report = {k: str(v) for k, v in write_report(report_dir, result).items()}
    return result


def _collect(result: RunResult, ctx: Ctx, cluster) -> None:
    """Everything the report needs, read while the parts are still up."""
    result.steps = ctx.steps
    result.schedule = ctx.schedule
    try:
        result.imds_events = ctx.imds.events()
    except Exception as e:  # noqa: BLE001
        result.imds_events = [{"error": str(e)}]
    result.audit = [_jsonable(r) for r in cluster.cloud.gate.audit.records()]
    owners = cluster.cloud.gate.owners()
    for n, node in enumerate(cluster.fabric.nodes):
        enis = [{"eni_id": e.eni_id, "mac": e.mac, "device_index": e.device_index,
                 "primary_ip": e.primary_ip} for e in owners.enis.values()
                if e.instance_id == node.instance_id]
        result.nodes.append({"index": n, "name": node.name, "instance_id": node.instance_id,
                             "enis": enis})
        try:
            st = cluster.status(n)
            result.daemon_events[node.name] = st.pop("events", [])
            result.daemon_views[node.name] = st
        except Exception as e:  # noqa: BLE001
            result.daemon_views[node.name] = {"error": str(e)}


def write_report(out_dir: str | Path, result: RunResult) -> dict:
    """cnikit.report.write_report when it is there; report.json alone otherwise."""
    try:
        from cnikit.report import write_report as full
    except ImportError:
        full = None
    if full is not None:
        return full(out_dir, result)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(json.dumps(result.to_json(), default=str, indent=1))
    return {"json": path}
