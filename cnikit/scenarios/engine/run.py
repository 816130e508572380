"""Running one scenario: start the cluster, watch it, play the scenario, judge, report."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from cnikit.check.stall import StallMeter
from cnikit.errors import UsageError
from cnikit.scenarios.engine.collect import collect
from cnikit.scenarios.engine.ctx import Ctx
from cnikit.scenarios.engine.outcomes import (
    SCENARIO,
    Liveness,
    NotExposed,
    Precondition,
    ScenarioFailed,
    TooSlow,
)
from cnikit.scenarios.engine.registry import Scenario
from cnikit.scenarios.engine.result import RunResult
from cnikit.scenarios.engine.sampler import DaemonSampler
from cnikit.scenarios.engine.verdict import judge

DEFAULT_SCALE = 0.05  # 60 s reconcile -> 3 s, 30 s IP cooldown -> 1.5 s
STRICT_LEAKS_ENV = "CNIKIT_STRICT_LEAKS"  # "1": leaks are violations (what certify sets)

# Daemon settings every scenario shares. The observe ports (61678/61679) stay on: each
# node's daemon has its own namespace, so the fixed ports do not collide.
# The reference daemon's private status API is off in every run: scenarios observe any
# build from outside only (EC2, the IMDS and its request log, pods, CNI results, processes,
# the target's [observe] ports), so its verdicts hold for builds without that API.
BASE_ENV: dict[str, str] = {"CNIKIT_PRIVATE_STATUS": "off"}


# ---- the cluster, with the EC2 upstream of the user's choice ----------------------------

def make_cluster(nodes: int, target, scale: float, env: dict, seed: int, ec2: str,
                 ec2_endpoint: str | None, instance_type: str = "m5.large",
                 runtime: str | None = None, ip_family: str | None = None,
                 instance_types: tuple[str, ...] = (), subnets=None):
    """A CniCluster (not started) running `target` (a Target, built-in name or file) with
    pods of `ip_family`, in the scenario's `subnets` (a registry.Subnets; None: one
    untagged subnet)."""
    from cnikit.cluster import CniCluster

    return CniCluster(nodes=nodes, target=target, instance_type=instance_type, scale=scale,
                      env={**BASE_ENV, **env}, imds_seed=seed, ec2=ec2, ec2_endpoint=ec2_endpoint,
                      seed=seed, runtime=runtime, ip_family=ip_family,
                      instance_types=instance_types or None,
                      subnet_tags=subnets.node_tags if subnets else None,
                      subnets=subnets.others if subnets else ())


# ---- running one ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is made, beyond its scenario, target and seed."""

    ec2: str = "moto"  # the EC2 upstream behind the gate: moto or localstack
    ec2_endpoint: str | None = None  # a running upstream's URL (None: the kit starts one)
    duration: float | None = None  # seconds of chaos (None: the scenario's own)
    scale: float | None = None  # the time scale (None: CNIKIT_TIME_SCALE, else DEFAULT_SCALE)
    observe: float = 1.0  # seconds still watched once the scenario ends: late effects count
    runtime: str | None = None  # where the daemons run (process, podman, docker)
    # A leak is a violation (certification) rather than a warning; None: CNIKIT_STRICT_LEAKS=1
    # in the environment.
    strict_leaks: bool | None = None
    # The factors of the slower time scales a run the machine was too slow for is run again
    # at (None: CNIKIT_SLOWER_SCALES, else 2 then 4; cnikit.scenarios.engine.adapt).
    slower: tuple[float, ...] | None = None

    def check(self) -> None:
        """A one-line UsageError for a setting no run can take."""
        if self.ec2 not in ("moto", "localstack"):
            raise UsageError(f"--ec2 must be moto or localstack, not {self.ec2!r}")
        if self.duration is not None and self.duration <= 0:
            raise UsageError(f"--duration must be positive, got {self.duration}")


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


def run_scenario(sc: Scenario, target=None, seed: int = 1,
                 report_dir: str | Path | None = None, options: RunOptions | None = None, *,
                 on_step: Callable | None = None,
                 progress: Callable[[str], None] | None = None, profile: str | None = None,
                 **settings) -> RunResult:
    """Bring up the cluster, watch it, play the scenario, judge, tear everything down.
    `target`: a Target, a built-in name or a target file (default the default profile);
    `profile=` is an alias for a built-in name. How the run is made: `options`, or its
    fields (RunOptions) given as keywords, which override those of `options`.

    A run the machine was too slow for is run again at slower time scales
    (RunOptions.slower) before it may be called inconclusive; the result says which scale it
    used and why."""
    from cnikit.runtime import require_root
    from cnikit.scenarios.engine import adapt

    opts = dataclasses.replace(options or RunOptions(), **settings)
    tgt = _resolve(sc, target, profile)
    opts.check()
    factors = adapt.factors(opts.slower)
    require_root(f"scenario {sc.name}")
    scale = _base_scale(opts)
    say = progress or (lambda msg: None)

    def attempt(factor: float) -> RunResult:
        return _Attempt(sc, tgt, seed, opts, scale * factor, on_step, say).run()

    return adapt.run(attempt, scale, factors, report_dir, write_report, say,
                     f"{sc.name} [{tgt.name}] seed {seed}")


def _resolve(sc: Scenario, target, profile: str | None):
    """The Target a run is against, refused in one line when it cannot run `sc`."""
    from cnikit.targets import default_name, resolve_target

    if target is None and profile is not None:
        check_profile(profile)
    tgt = resolve_target(target or profile or default_name())
    if not tgt.runs(sc):
        raise UsageError(f"scenario {sc.name} is an {sc.family} scenario; {tgt.name} runs "
                         f"{' and '.join(tgt.families)} (its ip_family)")
    return tgt


def _base_scale(opts: RunOptions) -> float:
    from cnikit.runtime import time_scale

    if opts.scale is not None:
        return opts.scale
    return time_scale() if "CNIKIT_TIME_SCALE" in os.environ else DEFAULT_SCALE


class _Attempt:
    """One run at one time scale, judged, its report not yet written (run_scenario, without
    its re-runs): start the cluster and its watch, play the scenario, tear down, judge."""

    def __init__(self, sc: Scenario, tgt, seed: int, opts: RunOptions, scale: float,
                 on_step: Callable | None, say: Callable[[str], None]):
        self.sc, self.tgt, self.seed, self.opts, self.scale = sc, tgt, seed, opts, scale
        self.on_step, self.say = on_step, say
        self.label = f"{sc.name} [{tgt.name}]"
        self.duration = opts.duration if opts.duration is not None else sc.duration
        self.watch = self.sampler = self.ctx = self.cluster = None
        self.liveness: list[dict] = []

    def run(self) -> RunResult:
        from cnikit.containers.options import runtime_params

        t0 = time.monotonic()
        self.result = self._new_result()
        self.say(f"{self.label} seed {self.seed}: starting {self.sc.nodes} node(s)")
        self.cluster = make_cluster(self.sc.nodes, self.tgt, self.scale, self.sc.env, self.seed,
                                    self.opts.ec2, self.opts.ec2_endpoint,
                                    instance_type=self.sc.instance_type,
                                    runtime=self.opts.runtime, ip_family=self.sc.vpc_family,
                                    instance_types=self.sc.instance_types,
                                    subnets=self.sc.subnets)
        self.result.params.update(runtime_params(self.cluster.runtime))
        # The cluster's history: its nemesis records every fault there, the watch the rest.
        self.history = self.cluster.history
        self.stalls = StallMeter(self.scale).start()
        try:
            self._start()
            self._play()
            collect(self.result, self.ctx, self.cluster)
        except Liveness as e:  # the build's daemons never became ready: nothing else ran
            self.liveness.append(e.record())
        finally:
            self._tear_down()
        judge(self.result, self.watch, self.history,
              self.liveness + (self.sampler.liveness if self.sampler else []), self.stalls)
        self.result.seconds = round(time.monotonic() - t0, 2)
        return self.result

    def _new_result(self) -> RunResult:
        sc, tgt = self.sc, self.tgt
        return RunResult(sc.name, sc.description, tgt.name, self.seed, "error",
                         tgt.expected(sc.name), 0.0, time.time(), target=tgt.name,
                         params={"scale": self.scale, "env": sc.env, "nodes": sc.nodes,
                                 "instance_type": sc.instance_type,
                                 **({"instance_types": list(sc.instance_types)}
                                    if sc.instance_types else {}),
                                 **({"subnets": sc.subnets.to_json()} if sc.subnets else {}),
                                 "ip_family": sc.vpc_family, "duration": self.duration,
                                 "ec2": self.opts.ec2,
                                 "target": str(tgt.source) if tgt.source else tgt.name},
                         versions=_versions())

    def _start(self) -> None:
        """The cluster, then the watch on it (prober, monitor, checkers), the daemon sampler
        and the scenario's Ctx."""
        from cnikit.check.watch import Watch, required_ip_cooldown

        sc, scale, params = self.sc, self.scale, self.result.params
        _start(self.cluster)
        params["run_id"] = self.cluster.fabric.rid  # names its namespaces, files, processes
        strict_leaks = self.opts.strict_leaks
        if strict_leaks is None:
            strict_leaks = os.environ.get(STRICT_LEAKS_ENV) == "1"
        params["strict_leaks"] = strict_leaks
        self.watch = Watch(self.cluster.fabric, self.history, leak_grace=max(5.0, 60 * scale),
                           ip_cooldown=required_ip_cooldown(sc.env, scale),
                           strict_leaks=strict_leaks).start()
        self.sampler = DaemonSampler(self.cluster, self.history,
                                     observe=self.tgt.observe).start()
        self.ctx = Ctx(self.cluster, self.watch, self.seed, self.tgt.name, scale,
                       self.duration, self.on_step, sampler=self.sampler, env=sc.env)

    def _play(self) -> None:
        """The scenario, and how it ended early (if it did) in the result and the history."""
        from cnikit.cluster.nemesis import TargetGone

        result, history, ctx = self.result, self.history, self.ctx
        result.started = time.time()
        history.info(SCENARIO, "start", {"scenario": self.sc.name, "target": self.tgt.name,
                                         "seed": self.seed})
        self.say(f"{self.label}: running")
        try:
            self.sc.fn(ctx)
            # Late effects (a route withdrawn, a probe timing out) still count.
            ctx.run_for(self.opts.observe)
        except NotExposed as e:
            history.info(SCENARIO, "not-exposed", {"what": str(e)})
            ctx.run_for(self.opts.observe)
        except Liveness as e:
            self.liveness.append(e.record())
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
            history.info(SCENARIO, "schedule", {"seed": self.seed, "operations": ctx.schedule})
        history.info(SCENARIO, "end", {"error": result.error})

    def _tear_down(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.watch is not None:
            self.watch.stop()
        self.stalls.stop()
        self.say(f"{self.label}: tearing down")
        self.cluster.close()


def _start(cluster) -> None:
    """Start the cluster; a daemon under test that never becomes ready is the build's
    liveness violation (the kit and the machine are up by then), not an error."""
    from cnikit.errors import DaemonNotReady

    try:
        cluster.start()
    except DaemonNotReady as e:
        raise Liveness("daemon", "a daemon never became ready", {"daemon": str(e)[:300]}) from None


def write_report(out_dir: str | Path, result: RunResult) -> dict:
    """report.json and report.html (cnikit.report) into out_dir."""
    from cnikit.report import write_report as write

    return write(out_dir, result)
