"""The run engine: a live cluster, the watch (prober, monitor, checkers), a scenario's
clients and nemesis, and the verdict the checkers reach.

A scenario only acts and waits (on conditions, with deadlines); it never decides the
verdict. Every action lands in the history, next to what the prober and the monitor saw.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cnikit.check.history import CLIENT, MONITOR, History
from cnikit.check.stall import StallMeter, run_too_slow
from cnikit.errors import UsageError

SCENARIO = "scenario"  # history process of the scenario's own step markers
DEFAULT_SCALE = 0.05  # 60 s reconcile -> 3 s, 30 s IP cooldown -> 1.5 s
STRICT_LEAKS_ENV = "CNIKIT_STRICT_LEAKS"  # "1": leaks are violations (what certify sets)

# Daemon settings every scenario shares. The observe ports (61678/61679) stay on: each
# node's daemon has its own namespace, so the fixed ports do not collide.
# The reference daemon's private status API is off in every run: scenarios observe any
# build from outside only (EC2, the IMDS and its request log, pods, CNI results, processes,
# the target's [observe] ports), so its verdicts hold for builds without that API.
BASE_ENV: dict[str, str] = {"CNIKIT_PRIVATE_STATUS": "off"}


class ScenarioFailed(Exception):
    """The kit could not drive the system where it wanted: the run is an `error` (exit 2),
    a problem of the kit, the machine or the target file, not a verdict on the build."""


class Precondition(ScenarioFailed):
    """The scenario could not set up what its fault needs (free addresses in the subnet, room
    for a pod, a race a busy machine lost every time): the run is `inconclusive`, with `what`
    as RunResult.precondition. A design feature the build lacks is not one: see Ctx.design."""


class TooSlow(Precondition):
    """The machine was too slow for the time scale to set up the scenario's race (no pod
    came back within the IP cooldown of a delete): the run is inconclusive and says so in
    `too_slow`; a violation found meanwhile still stands."""

    def __init__(self, what: str):
        super().__init__(f"the machine was too slow for the time scale: {what}")


class NotExposed(Exception):
    """The build has nothing the scenario's fault could act on (no secondary ENI for IMDS
    to miss, no daemon write to crash in, no address released to take): the scenario ends
    here, the run is still watched and judged, and its exposure says why it was not exposed
    (cnikit.check.exposure). Raised by `ctx.not_exposed`."""


class Liveness(ScenarioFailed):
    """The build made no progress any correct build must make (a pod got no IP within a
    bound, a daemon never became ready): a liveness violation, with evidence."""

    def __init__(self, subject: str, what: str, evidence: dict | None = None):
        super().__init__(f"{subject}: {what}")
        self.subject, self.what, self.evidence = subject, what, dict(evidence or {})

    def record(self, at: float | None = None) -> dict:
        return liveness_record(self.subject, self.what, self.evidence, at)


def liveness_record(subject: str, what: str, evidence: dict | None = None,
                    at: float | None = None, timed: bool = True) -> dict:
    """A violation record of kind "liveness", shaped like the checkers' (cnikit.check).
    `timed`: whether a late machine can fake it (a bound not met; not a daemon's exit)."""
    detail = {"what": what, "evidence": dict(evidence or {})}
    if not timed:
        detail["timed"] = False
    return {"kind": "liveness", "subject": subject, "since": time.time() if at is None else at,
            "until": None, "severity": "violation", "detail": detail}


@dataclass
class Scenario:
    name: str
    description: str
    fn: Callable[[Ctx], None]
    why: str = ""
    nodes: int = 2
    env: dict[str, str] = field(default_factory=dict)
    duration: float | None = None  # default --duration (seconds of chaos), if it takes one
    instance_type: str = "m5.large"  # every node's: its ENI and address limits

    @property
    def expected(self) -> dict[str, str | None]:
        """Built-in target -> its expected verdict (the profiles declare them)."""
        from cnikit.daemon import profiles

        return {p.name: p.expected_verdict(self.name) for p in profiles.registry().values()}


REGISTRY: dict[str, Scenario] = {}


def scenario(name: str, description: str, why: str = "", nodes: int = 2,
             env: dict[str, str] | None = None, duration: float | None = None,
             instance_type: str = "m5.large"):
    """Register fn(ctx) as a named scenario (one line of description; why each profile
    reaches the verdict its profile module (cnikit.daemon.profiles) expects)."""

    def deco(fn):
        REGISTRY[name] = Scenario(name, description, fn, why, nodes, dict(env or {}), duration,
                                  instance_type)
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
    # Set when the machine was too slow for the time scale to judge the run (a stall before
    # its violations, a case a checker could not judge: cnikit.check.stall; a race the
    # scenario lost: TooSlow): the run is inconclusive, its precondition says why.
    too_slow: str | None = None
    exercised: bool = True  # False when inconclusive/error before the build was exercised
    # What of the run's faults reached the build (cnikit.check.exposure.judge).
    exposure: dict = field(default_factory=dict)
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
        """One line per violation, in time order: when (seconds into the run), what, which
        pod and IP. A short list keeps the first of every kind, so it still names every kind
        that broke."""
        out = []
        by_time = sorted(range(len(self.violations)),
                         key=lambda i: (self.violations[i].get("since") or 0, i))
        firsts: dict[str, int] = {}
        for i in by_time:
            firsts.setdefault(self.violations[i]["kind"], i)
        kept = set(list(firsts.values())[:limit])
        kept |= set([i for i in by_time if i not in kept][:limit - len(kept)])
        for v in [self.violations[i] for i in by_time if i in kept]:
            until = "" if v.get("until") is None else f" until +{v['until'] - self.started:.2f}s"
            if v["kind"] == "liveness":
                out.append(f"+{v['since'] - self.started:.2f}s liveness: {v['subject']} ({v['what']})")
                continue
            out.append(f"+{v['since'] - self.started:.2f}s{until} {v['kind']}: pod {v['pod'] or '-'} "
                       f"ip {v['ip'] or '-'} ({v['what']})")
        if len(self.violations) > limit:
            out.append(f"... and {len(self.violations) - limit} more")
        return out


def _describe(v: dict, pods: dict[str, dict]) -> dict:
    d = v.get("detail") or {}
    if v["kind"] == "shared-ip":
        ip, pod = v["subject"], ",".join(d.get("pods", []))
        what = f"IP held by pods {', '.join(d.get('pods', []))} ({d.get('evidence')})"
    elif v["kind"] == "ip-not-owned":
        pod, ip = v["subject"], d.get("ip")
        what = f"EC2 assigns it to {d.get('held_by') or 'nobody'}, not the pod's node {d.get('node')}"
    elif v["kind"] == "unreachable":
        pod = v["subject"]
        ip = pods.get(pod, {}).get("ip")
        what = f"no answer from {d.get('failing_pairs')} peers"
    elif v["kind"] == "liveness":
        pod, ip = v["subject"], None
        ev = d.get("evidence") or {}
        what = d.get("what", "") + (f" [{'; '.join(f'{k}: {x}' for k, x in ev.items())}]"
                                    if ev else "")
    else:  # a checker that words its own evidence says `what`; else its detail as it is
        pod, ip = v["subject"], d.get("ip")
        what = d.get("what") or json.dumps(d, default=str)
    return {**v, "pod": pod, "ip": ip, "what": what}


# ---- the cluster, with the EC2 upstream of the user's choice ----------------------------

def make_cluster(nodes: int, target, scale: float, env: dict, seed: int, ec2: str,
                 ec2_endpoint: str | None, instance_type: str = "m5.large",
                 runtime: str | None = None):
    """A CniCluster (not started) running `target` (a Target, built-in name or file)."""
    from cnikit.cluster import CniCluster

    return CniCluster(nodes=nodes, target=target, instance_type=instance_type, scale=scale,
                      env={**BASE_ENV, **env}, imds_seed=seed, ec2=ec2, ec2_endpoint=ec2_endpoint,
                      seed=seed, runtime=runtime)


class DaemonSampler:
    """Watches each node's build from outside while the scenario runs: its daemon process
    (one that exits by itself is a liveness violation) and, when the target declares the
    [observe] introspection port, its datastore (upstream's /v1/enis) whenever it changes."""

    REPEAT = 1.0  # seconds: an unchanged view is recorded again this often

    def __init__(self, cluster, history: History, interval: float = 0.2, observe=None):
        self.c, self.h, self.interval = cluster, history, interval
        if observe is None:
            observe = getattr(getattr(cluster, "target", None), "observe", None)
        self.introspection = getattr(observe, "introspection", None)
        self.kit_down: set[int] = set()  # nodes whose daemon the kit stopped or is restarting
        self.liveness: list[dict] = []
        self._stop = threading.Event()
        self._last: dict[int, object] = {}
        self._sent: dict[int, float] = {}  # node -> when its last recorded view was asked
        self._exited: set[int] = set()
        self._thread = threading.Thread(target=self._loop, name="daemon-sampler", daemon=True)

    def start(self) -> DaemonSampler:
        self._thread.start()
        return self

    def view(self, node: int) -> dict:
        """The node's /v1/enis (upstream's JSON), read inside its namespace."""
        from cnikit.scenarios.blackbox import introspect

        if not self.introspection:
            raise OSError("the target declares no [observe] introspection port")
        return introspect(self.c.fabric.nodes[node].ns.path, self.introspection)

    def sample(self, node: int) -> None:
        self._check_alive(node)
        if not self.introspection:
            return
        from cnikit.scenarios.blackbox import enis_view

        iid = self.c.fabric.nodes[node].instance_id
        # When the view was asked for: a daemon that answers late (busy with EC2) answers
        # with its state of then or later, never of before. Checkers judge by this time.
        asked = time.time()
        try:
            enis, held = enis_view(self.view(node))
        except (OSError, ValueError) as e:  # a daemon down is an observation
            if self._last.get(node) != "down":
                self._last[node] = "down"
                self.h.info(MONITOR, "daemon-view-error", {"instance_id": iid, "error": str(e)})
            return
        key = (enis, held)
        # Unchanged views are recorded again now and then, so a checker knows the view it
        # holds is still current (and not the last answer before the daemon went quiet).
        if self._last.get(node) == key and asked - self._sent.get(node, 0.0) < self.REPEAT:
            return
        self._last[node], self._sent[node] = key, asked
        ips = sorted({ip for v in enis.values() for ip in v if "/" not in ip})
        self.h.info(MONITOR, "daemon-view", {"instance_id": iid, "ips": ips, "enis": enis,
                                             "assigned": held, "at": asked})

    def _check_alive(self, node: int) -> None:
        daemons = getattr(self.c, "daemons", None) or []
        d = daemons[node] if node < len(daemons) else None
        alive = getattr(d, "alive", None)
        if alive is None or node in self.kit_down:
            return
        if alive():
            self._exited.discard(node)
            return
        # Asked again: the kit marks a node before it kills, so a kill that landed between
        # the first look and alive() shows here.
        if node in self._exited or node in self.kit_down:
            return
        self._exited.add(node)
        proc = getattr(d, "proc", None)
        tail = getattr(d, "tail", None)
        evidence = {"exit code": getattr(proc, "returncode", None),
                    "log": tail() if tail else None}
        rec = liveness_record(self.c.fabric.nodes[node].name,
                              "the daemon exited by itself (the kit neither stopped nor killed it)",
                              evidence, timed=False)  # a process fact, however slow the machine
        self.liveness.append(rec)
        self.h.info(MONITOR, "daemon-exited", {"node": node, **evidence})

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


class Ctx:
    """Clients, nemesis and waits for one run. Times given to a scenario in upstream seconds
    go through `ctx.t()` (the run's time scale)."""

    def __init__(self, cluster, watch, seed: int, profile: str, scale: float,
                 duration: float | None, on_step: Callable | None = None,
                 sampler: DaemonSampler | None = None, env: dict | None = None):
        self.cluster = cluster
        self.fabric = cluster.fabric
        self.cloud = cluster.cloud
        self.gate = cluster.cloud.gate
        # Every fault goes through the cluster's nemesis (cnikit.cluster.nemesis): one
        # operation and one history shape each. ctx.imds is its fault client (adds recorded).
        self.nemesis = cluster.nemesis
        self.imds = cluster.nemesis.imds
        self.imds_url = cluster.imds.url
        self.watch = watch
        self.history: History = watch.history
        self.seed = seed
        self.rng = random.Random(seed)
        self.profile = profile
        self.scale = scale
        self.duration = duration
        self.on_step = on_step
        self.sampler = sampler
        # Upstream's variables the build was given: the warm targets EC2's view is held to.
        self.env = dict(env if env is not None else getattr(cluster, "env", None) or {})
        self.instance_type = getattr(cluster, "instance_type", "m5.large")
        target = getattr(cluster, "target", None)
        # Pods a node takes (kubelet's --max-pods): no scenario asks a node for more.
        self.max_pods = (target.max_pods_for(self.instance_type) if target is not None
                         else 10**6)
        self.pods: dict[str, object] = {}  # netns name -> fabric Pod, in creation order
        self.steps: list[dict] = []
        self.schedule: list[dict] = []
        self.started = time.monotonic()
        self._pod_numbers = itertools.count(1)  # next() is atomic: adds run in threads too
        self.add_failures = 0
        self.last_add_error: dict[int, str] = {}  # node -> the last failed ADD's answer
        self._spare: str | None = None
        self._reconciling: set[tuple[int, bool]] = set()  # nodes seen reading their ENI list

    # -- time ------------------------------------------------------------------------------

    def t(self, upstream_seconds: float) -> float:
        return upstream_seconds * self.scale

    @property
    def ip_cooldown(self) -> float:
        """The IP cooldown the run holds the build to, in run seconds (the watch's)."""
        from cnikit.check.watch import required_ip_cooldown

        return required_ip_cooldown(self.env, self.scale)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def run_for(self, seconds: float) -> None:
        """Let the system run (faults active, daemons working) for a while, watching."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check_progress()
            time.sleep(min(left, 0.1))

    def check_progress(self) -> None:
        """Stop the scenario once the build is caught stuck (a daemon exited by itself):
        the verdict is made, and waiting on a dead build only costs time."""
        if self.sampler is not None and self.sampler.liveness:
            rec = self.sampler.liveness[0]
            raise Liveness(rec["subject"], rec["detail"]["what"], rec["detail"]["evidence"])

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
            self.check_progress()
            if time.monotonic() >= end:
                raise ScenarioFailed(f"timed out after {timeout:.1f}s waiting for {what}{last}")
            time.sleep(poll)

    def precondition(self, pred: Callable[[], object], timeout: float, what: str,
                     poll: float = 0.05):
        """wait_until for what the scenario must set up (steady EC2, room in the subnet):
        unmet -> Precondition (the run is inconclusive, not an error of the kit). For a
        design feature the build may lack, use `design`."""
        try:
            return self.wait_until(pred, timeout, what, poll)
        except (Precondition, Liveness):
            raise
        except ScenarioFailed as e:
            raise Precondition(str(e).replace("timed out", "not met", 1)) from None

    def design(self, pred: Callable[[], object], timeout: float, what: str,
               poll: float = 0.05):
        """wait_until for a design feature the scenario can go on without (addresses
        released to EC2, a second ENI): unmet -> `adapt` and None."""
        try:
            return self.wait_until(pred, timeout, what, poll)
        except (Precondition, Liveness):
            raise
        except ScenarioFailed:
            self.adapt(f"not within {timeout:.1f}s: {what}; the scenario went on without it")
            return None

    def not_exposed(self, why: str):
        """End the scenario: the build has nothing its fault could act on (NotExposed)."""
        raise NotExposed(why)

    def adapt(self, what: str) -> None:
        """The build lacks a design feature the scenario would have waited for (a warm pool,
        reconcile reads of IMDS, releases to EC2): the scenario goes on without it, and the
        run's exposure says so (cnikit.check.exposure)."""
        self.history.info(SCENARIO, "adapt", {"what": what, "t": round(self.elapsed(), 3)})

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
        """ADD through the target's plugin as a runtime would, retrying failures like kubelet
        does. Returns the Pod, or None when the build gave no IP in time, or when the node
        already runs its max_pods (the scheduler sends no pod to a full node)."""
        from cnikit.errors import CnikitError

        if self.room(node) <= 0:
            self.history.info(SCENARIO, "node-full", {"node": node, "max_pods": self.max_pods})
            return None
        name = f"pod-{next(self._pod_numbers)}"
        end = time.monotonic() + retry_for
        while True:
            try:
                pod = self.cluster.add_pod(node, name)
            except CnikitError as e:
                self.last_add_error[node] = str(e)[:300]
                self.history.append(CLIENT, "fail", "pod-add", {"pod": name, "node": node,
                                                                 "error": str(e)[:200]})
                if time.monotonic() >= end:
                    self.add_failures += 1
                    return None
                self.check_progress()
                time.sleep(poll)
                continue
            pod.k8s_name = name
            pod.added_at = time.monotonic()  # when its ADD came back (scenarios time races)
            self.pods[pod.name] = pod
            return pod

    def require_pod(self, node: int, retry_for: float = 10.0):
        """A pod any correct build must give an IP (no fault active, room in EC2): none
        within `retry_for` is a liveness violation of the build."""
        if self.room(node) <= 0:
            raise Precondition(f"room for one more pod on node {node} (max_pods {self.max_pods})")
        pod = self.add_pod(node, retry_for=retry_for)
        if pod is None:
            raise Liveness(f"node {node}", f"a pod got no IP within {retry_for:g}s",
                           {"last CNI error": self.last_add_error.get(node, "-")})
        return pod

    def delete_pod(self, pod) -> None:
        self.pods.pop(pod.name, None)
        try:
            self.cluster.delete_pod(pod)
        except Exception as e:  # noqa: BLE001 - a failing DEL is recorded, the pod is gone anyway
            self.history.append(CLIENT, "fail", "pod-delete", {"pod": pod.name, "error": str(e)[:200]})

    def pods_on(self, node: int) -> list:
        return [p for p in self.pods.values() if p.node.index == node]

    def room(self, node: int) -> int:
        """How many more pods the node takes (its max_pods less its live pods)."""
        return self.max_pods - len(self.pods_on(node))

    # -- nemesis (cnikit.cluster.nemesis: one operation, one history shape each) -------------

    def imds_fault(self, kind: str, target: dict | None = None, duration: float | None = None,
                   **attrs):
        return self.nemesis.imds_fault(kind, target=target, duration=duration, **attrs)

    def end_imds_fault(self, handle) -> None:
        self.nemesis.end(handle)

    def ec2_fault(self, kind: str, **kw) -> str:
        return self.nemesis.ec2_fault(kind, **kw)

    def end_ec2_fault(self, fid: str) -> None:
        self.nemesis.end(fid)

    def heal(self) -> None:
        """Every IMDS and EC2 fault removed."""
        self.nemesis.heal()

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL) -> None:
        if self.sampler is not None:
            self.sampler.kit_down.add(node)
        self.nemesis.kill_daemon(node, sig)

    def kill_in_write(self, node: int):
        """Arm the nemesis's trap: the node's daemon is SIGKILLed the next time it opens a
        file of its state for writing (cnikit.cluster.write_trap). Returns the trap."""
        def down() -> None:
            if self.sampler is not None:
                self.sampler.kit_down.add(node)
        return self.nemesis.kill_in_write(node, before=down)

    def restart_daemon(self, node: int) -> None:
        """Restart the node's daemon and wait until it is ready. Not ready in time: a
        liveness violation (Liveness) of the build; the kit keeps it marked as down."""
        from cnikit.errors import DaemonNotReady

        if self.sampler is not None:
            self.sampler.kit_down.add(node)
        try:
            self.nemesis.restart_daemon(node)
        except DaemonNotReady as e:
            raise Liveness(f"node {node}", "the daemon did not become ready after a restart",
                           {"daemon": str(e)[:300]}) from None
        if self.sampler is not None:
            self.sampler.kit_down.discard(node)

    def ec2_take(self, ips: list[str], node: int | None = None) -> None:
        """Another tenant of the subnet takes these IPs: the spare interface, which no daemon
        manages, so none gives them back to EC2 while the run lasts; or `node`'s primary ENI,
        whose daemon may release them again as surplus (within a second, measured, and EC2
        then handed them back to the node that had just released them)."""
        if not ips:
            return
        eni = self.spare_interface() if node is None else \
            self.fabric.topo.instances[node].primary_eni_id
        self.nemesis.take_ips(eni, list(ips))

    def spare_interface(self) -> str:
        """Another interface of the subnet, attached to no node (an operator's, a load
        balancer's): what it takes is no node's, so no daemon adopts it. Made at first use:
        a scenario that takes released addresses makes it first (made at the take, its own
        EC2 call gave the pool time to assign a released address again)."""
        if self._spare is None:
            self._spare = self.cloud.client().create_network_interface(
                SubnetId=self.fabric.topo.subnet_id,
                Description="another interface")["NetworkInterface"]["NetworkInterfaceId"]
        return self._spare

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
        does not within two reconcile intervals, has no such pass (it never reads IMDS, or
        reads it once at start): the scenario goes on (`adapt`) and this returns now. A build
        that did read it and stops: Precondition."""
        reads = self.reconcile_reads(node, self.imds_mark(), attempts)
        if not self._reads_imds(node, attempts):
            self.adapt(f"node {node} made no reconcile read of its ENI list from IMDS "
                       f"since the run began: no pass to wait for")
            return time.time()
        timeout = timeout or max(10.0, self.t(60) * (n + 2))
        read = "request(s) for" if attempts else "full read(s) of"
        self.precondition(lambda: reads() >= n, timeout,
                          f"{n} {read} node {node}'s ENI list from IMDS (reconcile passes)")
        return reads.times[n - 1]

    def _reads_imds(self, node: int, attempts: bool) -> bool:
        """Whether the node reads its ENI list from IMDS at all: a read since the run began,
        or one within two reconcile intervals of the run's start (60 s upstream)."""
        key = (node, attempts)
        if key in self._reconciling:
            return True
        ever = self.reconcile_reads(node, 0, attempts)
        window = max(3.0, self.t(120))
        try:
            self.wait_until(lambda: ever() >= 1, max(0.0, window - self.elapsed()), "")
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
        from cnikit.cloud.limits import FALLBACK, InstanceLimits
        from cnikit.scenarios.blackbox import pool_view

        limits = FALLBACK.get(self.instance_type, InstanceLimits(3, 10))
        return pool_view(self.node_enis(node), self.pod_ips(node), limits)

    def ec2_pool(self, node: int) -> dict[str, list[str]]:
        """eni -> secondary IPs and prefixes EC2 assigns to the node."""
        return {e.eni_id: [ip for ip in e.ips if ip != e.primary_ip] + list(e.prefixes)
                for e in self.node_enis(node)}

    def _over_target(self, v) -> bool:
        """EC2 shows more free addresses than upstream's variables ask for (the build may
        release some after its decrease interval)."""
        from cnikit.cloud.limits import FALLBACK, InstanceLimits

        env = self.env
        warm_ip = int(env.get("WARM_IP_TARGET", 0) or 0)
        if warm_ip or int(env.get("MINIMUM_IP_TARGET", 0) or 0):
            return v.free > warm_ip
        if str(env.get("ENABLE_PREFIX_DELEGATION", "")).lower() in ("1", "true", "yes"):
            return v.free_prefixes > int(env.get("WARM_PREFIX_TARGET", 1) or 0)
        per_eni = FALLBACK.get(self.instance_type, InstanceLimits(3, 10)).ipv4_per_eni - 1
        return v.free >= (int(env.get("WARM_ENI_TARGET", 1) or 0) + 1) * per_eni

    def _ec2_key(self, node: int) -> tuple:
        return tuple(sorted((e.eni_id, tuple(sorted(e.ips)), tuple(sorted(e.prefixes)))
                            for e in self.node_enis(node)))

    def wait_pool_settles(self, node: int, timeout: float = 20.0) -> None:
        """Let the build's pool act after a fault (free surplus ENIs and addresses, top up):
        wait until EC2 shows the node's ENIs and addresses unchanged for a decrease interval
        and a pool pass. No target is asked for: a build whose own view went wrong may sit
        short of it. Never steady: Precondition."""
        settle = max(0.8, self.t(35))
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

        quiet, settle = max(0.4, self.t(10)), max(0.8, self.t(35))
        seen = {"key": None, "since": 0.0, "view": None, "short": False}

        def steady():
            key, now = self._ec2_key(node), time.monotonic()
            if key != seen["key"]:
                seen.update(key=key, since=now)
            v = seen["view"] = self.pool(node)
            still = now - seen["since"]
            if not warm_target_met(v, self.env, self.instance_type):
                # A pool manager acts within a pass (5 s upstream); unchanged for much longer
                # below its targets, the build keeps none (or a smaller one): its design.
                seen["short"] = still >= (settle if v.free == 0 else 3 * settle)
                return seen["short"]
            return still >= (settle if self._over_target(v) else quiet)

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
                 profile: str | None = None, strict_leaks: bool | None = None) -> RunResult:
    """Bring up the cluster, watch it, play the scenario, judge, tear everything down.
    `target`: a Target, a built-in name or a target file (default the default profile);
    `profile=` is an alias for a built-in name. `strict_leaks`: a leak is a violation
    (certification) rather than a warning; None: CNIKIT_STRICT_LEAKS=1 in the environment."""
    from cnikit.check.watch import Watch, required_ip_cooldown
    from cnikit.cluster.nemesis import TargetGone
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
                               "instance_type": sc.instance_type,
                               "duration": duration, "ec2": ec2,
                               "target": str(tgt.source) if tgt.source else tgt.name},
                       versions=_versions())
    say(f"{sc.name} [{profile}] seed {seed}: starting {sc.nodes} node(s)")
    cluster = make_cluster(sc.nodes, tgt, scale, sc.env, seed, ec2, ec2_endpoint,
                           instance_type=sc.instance_type, runtime=runtime)
    # The cluster's history: its nemesis records every fault there, the watch the rest.
    history = cluster.history
    watch = sampler = ctx = None
    liveness: list[dict] = []
    stalls = StallMeter(scale).start()
    try:
        _start(cluster)
        result.params["run_id"] = cluster.fabric.rid  # names its namespaces, files, processes
        if strict_leaks is None:
            strict_leaks = os.environ.get(STRICT_LEAKS_ENV) == "1"
        cooldown = required_ip_cooldown(sc.env, scale)
        result.params["strict_leaks"] = strict_leaks
        watch = Watch(cluster.fabric, history, leak_grace=max(5.0, 60 * scale),
                      ip_cooldown=cooldown, strict_leaks=strict_leaks).start()
        sampler = DaemonSampler(cluster, history, observe=tgt.observe).start()
        ctx = Ctx(cluster, watch, seed, profile, scale, duration, on_step, sampler=sampler,
                  env=sc.env)
        result.started = started = time.time()
        history.info(SCENARIO, "start", {"scenario": sc.name, "profile": profile, "seed": seed})
        say(f"{sc.name} [{profile}]: running")
        try:
            sc.fn(ctx)
            # Late effects (a route withdrawn, a probe timing out) still count.
            ctx.run_for(observe)
        except NotExposed as e:
            history.info(SCENARIO, "not-exposed", {"what": str(e)})
            ctx.run_for(observe)
        except Liveness as e:
            liveness.append(e.record())
            history.info(SCENARIO, "liveness", {"subject": e.subject, "what": e.what})
        except Precondition as e:
            result.precondition = str(e)
            if isinstance(e, TooSlow):
                result.too_slow = str(e)
            history.info(SCENARIO, "precondition", {"what": str(e)})
        except TargetGone as e:  # the build freed what the fault was aimed at: set-up lost
            result.precondition = str(e)
            history.info(SCENARIO, "precondition", {"what": str(e)})
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
    except Liveness as e:  # the build's daemons never became ready: nothing else ran
        liveness.append(e.record())
    finally:
        if sampler is not None:
            sampler.stop()
        if watch is not None:
            watch.stop()
        stalls.stop()
        say(f"{sc.name} [{profile}]: tearing down")
        cluster.close()
    _judge(result, watch, history, liveness + (sampler.liveness if sampler else []), stalls)
    result.seconds = round(time.monotonic() - t0, 2)
    if report_dir is not None:
        result.report = {k: str(v) for k, v in write_report(report_dir, result).items()}
    return result


def _start(cluster) -> None:
    """Start the cluster; a daemon under test that never becomes ready is the build's
    liveness violation (the kit and the machine are up by then), not an error."""
    from cnikit.errors import DaemonNotReady

    try:
        cluster.start()
    except DaemonNotReady as e:
        raise Liveness("daemon", "a daemon never became ready", {"daemon": str(e)[:300]}) from None


def _judge(result: RunResult, watch, history: History, liveness: list[dict],
           stalls: StallMeter | None = None) -> None:
    """The verdict: an invariant or liveness violation -> "violation" (unless the machine
    was too slow for the time scale just before it: "inconclusive", cnikit.check.stall);
    else a case a checker could not judge on this machine or an unmet precondition ->
    "inconclusive"; else a kit failure -> "error"; else
    "holds"."""
    pods = {}
    entries = history.entries()
    for e in entries:
        if e["process"] == CLIENT and e["type"] == "ok" and e["f"] == "pod-add":
            pods[e["value"]["pod"]] = e["value"]
    inv = watch.invariants if watch is not None else None
    found = [v.to_json() for v in inv.violations()] if inv is not None else []
    seen: set = set()
    liveness = [r for r in liveness if not ((r["subject"], r["detail"]["what"]) in seen
                                            or seen.add((r["subject"], r["detail"]["what"])))]
    result.violations = [_describe(v, pods) for v in found + liveness]
    result.warnings = [v.to_json() for v in inv.warnings()] if inv is not None else []
    result.history = entries
    if stalls is not None:
        result.params["stall"] = {"worst_s": round(stalls.worst, 3),
                                  "bound_s": round(stalls.bound, 3), "over": len(stalls.stalls)}
    slow = run_too_slow(stalls, result.violations, result.started,
                        inv.unjudged() if inv is not None else [])
    if slow:
        result.too_slow = slow
        result.verdict, result.precondition = "inconclusive", slow
    elif result.violations:
        result.too_slow = None  # a scenario's lost race (TooSlow) is outranked by a violation
        result.verdict = "violation"
    elif result.precondition:
        result.verdict = "inconclusive"
    else:
        result.verdict = "error" if result.error else "holds"
    result.exercised = result.verdict in ("holds", "violation")


def _targets(env: dict) -> str:
    keys = ("WARM_ENI_TARGET", "WARM_IP_TARGET", "MINIMUM_IP_TARGET", "WARM_PREFIX_TARGET",
            "ENABLE_PREFIX_DELEGATION", "MAX_ENI")
    return ", ".join(f"{k}={env[k]}" for k in keys if k in env) or "upstream's defaults"


IMDS_REQUESTS_KEPT = 20_000


def _collect(result: RunResult, ctx: Ctx, cluster) -> None:
    """Everything the report needs, read while the parts are still up: EC2 (the gate), the
    IMDS's events and request log, and the build's [observe] ports when declared."""
    result.steps = ctx.steps
    result.schedule = ctx.schedule
    try:
        result.imds_events = ctx.imds.events()
    except Exception as e:  # noqa: BLE001
        result.imds_events = [{"error": str(e)}]
    try:
        page = ctx.imds.requests(since=0, limit=IMDS_REQUESTS_KEPT)
        result.imds_requests = [r for r in page["requests"] if not r.get("observer")]
    except Exception as e:  # noqa: BLE001
        result.imds_requests = [{"error": str(e)}]
    result.audit = [_jsonable(r) for r in cluster.cloud.gate.audit.records()]
    from cnikit.check.exposure import judge

    result.exposure = judge(ctx.history.entries(), result.imds_requests,
                            cluster.cloud.gate.faults.reached(),
                            {n.instance_id: n.name for n in cluster.fabric.nodes})
    owners = cluster.cloud.gate.owners()
    sampler = ctx.sampler
    for n, node in enumerate(cluster.fabric.nodes):
        enis = [{"eni_id": e.eni_id, "mac": e.mac, "device_index": e.device_index,
                 "primary_ip": e.primary_ip} for e in owners.enis.values()
                if e.instance_id == node.instance_id]
        result.nodes.append({"index": n, "name": node.name, "instance_id": node.instance_id,
                             "enis": enis})
        if sampler is None or not sampler.introspection:
            continue
        from cnikit.scenarios.blackbox import introspect

        try:
            result.daemon_views[node.name] = sampler.view(n)
        except (OSError, ValueError) as e:
            result.daemon_views[node.name] = {"error": str(e)}
            continue
        try:  # the reference daemon's decisions (an extra path of its introspection port)
            events = introspect(node.ns.path, sampler.introspection, "/v1/events")
            result.daemon_events[node.name] = events if isinstance(events, list) else []
        except (OSError, ValueError):
            pass


def write_report(out_dir: str | Path, result: RunResult) -> dict:
    """report.json and report.html (cnikit.report) into out_dir."""
    from cnikit.report import write_report as write

    return write(out_dir, result)
