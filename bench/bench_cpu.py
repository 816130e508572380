"""Where a scenario run's CPU goes: per run, its total CPU and the share of each part.

Every run is made in one long-lived child process, as `cnikit matrix` and `cnikit certify`
make them in their workers (cnikit.scenarios.worker): what a fresh process pays once
(imports, EC2's service model, moto's first reset) is measured apart, by a warm-up run.

A run's total is the child's CPU over the run, its threads and every process it started and
reaped (utime + stime + cutime + cstime of /proc/<child>/stat), plus what the fork server
(cnikit.forkserver) and the daemons it forked used, which the child does not reap. Inside the child the parts
are told apart exactly rather than sampled, because the short-lived parts (a CNI plugin
exec per ADD and DEL, one moto thread per EC2 request) end between any two samples:
- a thread's CPU goes to its part, named by the thread's name or else inherited from the
  thread that started it (moto's request threads from moto's server thread), counted when
  it ends or at the end of the run;
- a process's CPU (with its own children's) comes from wait4 when the kit reaps it,
  classed by its command line;
- CPU spent in the fabric (netlink, namespaces), in botocore and in the kit's own phases
  (set-up, judging and report, teardown) is timed per call and moved out of the calling
  kit thread; Python's garbage collector out of whatever thread it interrupted.
What none of these sees (interpreter work between runs, rounding to clock ticks) is
reported as `unattributed_s`.

`--idle S` measures instead the floor under every run: two nodes with a pod each and
nothing happening for S seconds, each part's CPU in ms per second.

    bench/bench_cpu.py [--quick] [--profile P] [--scenario NAME ...] [--seed N] [--idle S]

Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import inspect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK = ["imds-stale-equal-length", "ip-reuse-cooldown", "restart-while-detaching"]
WARMUP = "imds-stale-equal-length"
TICK = os.sysconf("SC_CLK_TCK")

# A thread's part by its name (the first match); an unnamed thread takes its starter's.
THREAD_PARTS = [("fault-imds", "imds"), ("ec2-gate", "gate"), ("(_server_entry)", "moto"),
                ("fabric-sync", "fabric"), ("prober-", "prober"),
                ("monitor-", "kit:checkers"), ("stall-meter", "kit:checkers"),
                ("daemon-sampler", "kit:checkers")]
KIT = "kit:scenario"  # the main thread and the kit's other threads, unless a phase says more


def process_part(argv) -> str:
    """A reaped process's part, by its command line."""
    text = argv if isinstance(argv, str) else " ".join(map(str, argv))
    if " daemon --state-dir" in text:
        node = re.search(r"daemon-(?:ck-[^-/]+-)?([^/\s]+)", text)  # without the run id
        return f"daemon:{node.group(1) if node else '?'}"
    if "cnikit.check.prober_proc" in text:
        return "prober"
    if "cnikit.forkserver" in text:
        return "forkserver"
    if "cnikit.reaper" in text:
        return "reaper"
    first = Path(text.split()[0]).name if text else "?"
    if first.startswith("cnikit-cni"):
        return "cni-plugin"
    if first in ("iptables", "ip6tables", "ip", "nsenter", "sysctl"):
        return "fabric"
    if first in ("podman", "docker", "dockerd", "containerd", "podman-compose", "conmon"):
        return "containers"
    return f"other:{first}"


# -- in the child: the run's own process -------------------------------------------------


def stat_cpu(path: str, children: bool = False) -> float:
    """utime + stime (+ cutime + cstime) of a /proc/.../stat file, in seconds; 0 if gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    ticks = fields[11:15] if children else fields[11:13]
    return sum(int(t) for t in ticks) / TICK


class Ledger:
    """CPU seconds per part, inside the run's process (see the module's docstring)."""

    def __init__(self):
        self.done: collections.Counter = collections.Counter()  # ended threads, reaped, carved
        self.execs: collections.Counter = collections.Counter()
        self.live: dict[int, str] = {}  # pid -> part, started and not yet reaped
        self.lock = threading.Lock()

    def add(self, part: str, seconds: float) -> None:
        with self.lock:
            self.done[part] += seconds

    def snapshot(self) -> collections.Counter:
        """Every part's CPU so far: the counted, plus the live threads' and processes'."""
        with self.lock:
            snap = collections.Counter(self.done)
            live = dict(self.live)
        me = threading.current_thread()
        for t in threading.enumerate():
            cpu = (time.thread_time() if t is me
                   else stat_cpu(f"/proc/self/task/{t.native_id}/stat"))
            snap[getattr(t, "_bench_part", KIT)] += cpu - getattr(t, "_bench_carved", 0.0)
        for pid, part in live.items():
            # The fork server's children are counted each as itself (watch_processes).
            snap[part] += stat_cpu(f"/proc/{pid}/stat", children=part != "forkserver")
        return snap


def current_part() -> str:
    t = threading.current_thread()
    stack = getattr(t, "_bench_stack", None)
    return stack[-1][0] if stack else getattr(t, "_bench_part", KIT)


def enter(part: str) -> None:
    t = threading.current_thread()
    if not hasattr(t, "_bench_stack"):
        t._bench_stack, t._bench_carved = [], 0.0
    t._bench_stack.append([part, time.thread_time(), 0.0])


def leave(ledger: Ledger) -> None:
    # Exclusive time: a section nested in this one (netlink inside set-up) keeps its own.
    t = threading.current_thread()
    part, t0, nested = t._bench_stack.pop()
    spent = time.thread_time() - t0
    ledger.add(part, spent - nested)
    if t._bench_stack:
        t._bench_stack[-1][2] += spent
    else:
        t._bench_carved += spent


def carve(ledger: Ledger, owner, names, part: str) -> None:
    """Time calls of owner.<name> on the kit's own threads as `part`."""
    for name in names:
        fn = getattr(owner, name, None)
        if fn is None:
            print(f"bench_cpu: {owner.__name__}.{name} is gone; not carved", file=sys.stderr)
            continue

        @functools.wraps(fn)
        def timed(*a, __fn=fn, **k):
            if not getattr(threading.current_thread(), "_bench_part", KIT).startswith("kit:"):
                return __fn(*a, **k)  # moto's or the IMDS's calls stay theirs
            enter(part)
            try:
                return __fn(*a, **k)
            finally:
                leave(ledger)

        setattr(owner, name, timed)


def watch_threads(ledger: Ledger) -> None:
    start, inner = threading.Thread.start, threading.Thread._bootstrap_inner

    def started(self):
        self._bench_part = next((p for key, p in THREAD_PARTS if key in self.name),
                                current_part())
        self._bench_stack, self._bench_carved = [], 0.0
        return start(self)

    def bootstrap(self):
        try:
            inner(self)
        finally:
            ledger.add(getattr(self, "_bench_part", KIT),
                       time.thread_time() - getattr(self, "_bench_carved", 0.0))

    threading.Thread.start, threading.Thread._bootstrap_inner = started, bootstrap
    main = threading.main_thread()
    main._bench_part, main._bench_stack, main._bench_carved = KIT, [], 0.0


def watch_processes(ledger: Ledger) -> None:
    """wait4 instead of waitpid in subprocess: the rusage of each child as it is reaped."""
    from cnikit import forkserver

    init, waitpid = subprocess.Popen.__init__, os.waitpid

    def popen(self, *a, **k):
        init(self, *a, **k)
        with ledger.lock:
            ledger.live[self.pid] = process_part(self.args)

    def wait4(pid, options):
        if pid <= 0:
            return waitpid(pid, options)
        got, status, ru = os.wait4(pid, options)
        if got:
            with ledger.lock:
                part = ledger.live.pop(got, "other:?")
                ledger.done[part] += ru.ru_utime + ru.ru_stime
                ledger.execs[part] += 1
        return got, status

    subprocess.Popen.__init__, os.waitpid = popen, wait4

    # Programs the kit forks warm (cnikit.forkserver): the server reaps them and says what
    # each used.
    spawn = forkserver.ForkServer.spawn

    def forked(self, args, *a, **k):
        child = spawn(self, args, *a, **k)
        with ledger.lock:
            ledger.live[child.pid] = process_part(args)
        return child

    def reaped(child):
        with ledger.lock:
            part = ledger.live.pop(child.pid, process_part(child.args))
            ledger.done[part] += child.cpu
            ledger.execs[part] += 1

    forkserver.ForkServer.spawn, forkserver.ForkServer.on_exit = forked, reaped
    poll = subprocess.Popen._internal_poll  # binds waitpid as a default argument
    names = poll.__code__.co_varnames[:poll.__code__.co_argcount]
    defaults = list(poll.__defaults__)
    defaults[names.index("_waitpid") - (len(names) - len(defaults))] = wait4
    poll.__defaults__ = tuple(defaults)


def watch_gc(ledger: Ledger) -> None:
    def on_gc(phase, _info):
        if phase == "start":
            enter("gc")
        elif getattr(threading.current_thread(), "_bench_stack", None):
            leave(ledger)

    gc.callbacks.append(on_gc)


def install(ledger: Ledger) -> None:
    import botocore.client
    import botocore.session

    from cnikit.cluster.cni_cluster import CniCluster
    from cnikit.fabric import netlink, netns, topology
    from cnikit.scenarios.engine import run

    watch_threads(ledger)
    watch_processes(ledger)
    carve(ledger, netlink.Netlink, [n for n, v in vars(netlink.Netlink).items()
                                    if inspect.isfunction(v) and not n.startswith("__")],
          "fabric")
    carve(ledger, netns, ["setns", "create", "remove", "write_sysctl"], "fabric")
    carve(ledger, topology.Namespace, ["__init__", "close"], "fabric")
    carve(ledger, topology.Fabric, ["_build", "close", "apply", "_add_link", "_remove_link",
                                    "_new_pod_ns", "add_pod"], "fabric")
    carve(ledger, botocore.client.BaseClient, ["_make_api_call"], "kit:boto3")
    carve(ledger, botocore.session.Session, ["create_client"], "kit:boto3")
    carve(ledger, run, ["make_cluster", "_start"], "kit:set-up")
    carve(ledger, CniCluster, ["close"], "kit:teardown")
    carve(ledger, run, ["collect", "judge", "write_report"], "kit:judge+report")
    watch_gc(ledger)


def quiet_run(spec: dict, ledger: Ledger) -> dict:
    """A cluster left alone for spec["idle"] seconds: each part's CPU, ms per second."""
    from cnikit.scenarios.engine import registry, run
    from cnikit.scenarios.parallel import run_dir

    rates: dict = {}

    def quiet(ctx) -> None:
        ctx.require_pod(0)
        ctx.require_pod(1)
        ctx.run_for(1.0)  # the ADDs' after-effects (pool refill, probes) are not idle
        before, t0 = ledger.snapshot(), time.monotonic()
        ctx.run_for(spec["idle"])
        dt = time.monotonic() - t0
        rates.update((k, round(1000 * v / dt, 2)) for k, v in (ledger.snapshot() - before).items())

    sc = registry.Scenario("quiet-cluster", "two nodes, a pod each, nothing else", quiet)
    r = run.run_scenario(sc, target=spec["target"], seed=spec["seed"],
                         report_dir=run_dir(Path(spec["root"]), sc.name, spec["seed"]))
    return {"record": {"verdict": r.verdict, "error": r.error}, "by_class": rates}


def forked_cpu(ledger: Ledger) -> float:
    """What the fork servers and the programs they forked used so far: not in this
    process's own figures until a server is reaped."""
    from cnikit import forkserver

    with ledger.lock:
        live = [pid for pid, part in ledger.live.items() if part != "forkserver"]
    servers = [s.proc.pid for s in forkserver.ForkServer._servers.values()]
    return (sum(stat_cpu(f"/proc/{pid}/stat", children=True) for pid in servers)
            + sum(stat_cpu(f"/proc/{pid}/stat", children=True) for pid in live
                  if _parent(pid) in servers))


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def child() -> int:
    """Serve run specs one a line on stdin; answer each with the worker's record and the
    run's CPU per part."""
    from cnikit import scenarios
    from cnikit.fabric.cleanup import cleanup_on_signals
    from cnikit.scenarios.cli.common import _quiet_logs
    from cnikit.scenarios.worker import run_one
    from faultcore import gc_policy

    gc_policy.relax()  # as the worker does: its settings are part of what is measured
    _quiet_logs()
    scenarios.names()  # every scenario module imported before the first run
    ledger = Ledger()
    install(ledger)
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else writes to stdout goes to stderr
    answers.write('{"ready": true}\n')
    answers.flush()
    with cleanup_on_signals():
        for line in sys.stdin:
            before, execs = ledger.snapshot(), collections.Counter(ledger.execs)
            forked_before = forked_cpu(ledger)
            spec = json.loads(line)
            try:
                if "idle" in spec:
                    answer = quiet_run(spec, ledger)
                else:
                    answer = {"record": run_one(spec), "by_class": ledger.snapshot() - before}
            except Exception as e:  # noqa: BLE001 - one broken run must not end the bench
                answer = {"record": {"verdict": "error", "error": f"{type(e).__name__}: {e}"},
                          "by_class": ledger.snapshot() - before}
            answer["execs"] = ledger.execs - execs
            answer["forked_cpu"] = forked_cpu(ledger) - forked_before
            answers.write(json.dumps(answer, default=str) + "\n")
            answers.flush()
    return 0


# -- in the parent: one child, its runs one at a time ------------------------------------


class Child:
    def __init__(self):
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, __file__, "--child"], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if json.loads(self.proc.stdout.readline() or "{}").get("ready") is not True:
            raise RuntimeError(f"the run process did not start (exit {self.proc.wait()})")
        self.startup = {"wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(self.cpu(), 2)}

    def cpu(self) -> float:
        return stat_cpu(f"/proc/{self.proc.pid}/stat", children=True)

    def ask(self, spec: dict) -> dict:
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def run(self, spec: dict) -> dict:
        t0, cpu0 = time.monotonic(), self.cpu()
        answer = self.ask(spec)
        wall, cpu = time.monotonic() - t0, self.cpu() - cpu0 + answer.get("forked_cpu", 0.0)
        parts = {k: round(v, 3) for k, v in sorted(answer["by_class"].items(),
                                                   key=lambda kv: -kv[1]) if v >= 0.0005}
        rec = answer["record"]
        return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "by_class": parts,
                "unattributed_s": round(cpu - sum(parts.values()), 3),
                "verdict": rec.get("verdict"), "expected": rec.get("expected"),
                "execs": dict(sorted(answer["execs"].items()))}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def group(part: str) -> str:
    """daemon:node-1 -> daemons; kit:boto3 stays itself (the kit's parts are the question)."""
    return "daemons" if part.startswith("daemon:") else part


def summarize(runs: dict) -> dict:
    cpu = sum(r["cpu_s"] for r in runs.values())
    wall = sum(r["wall_s"] for r in runs.values())
    by: collections.Counter = collections.Counter()
    for r in runs.values():
        for part, s in r["by_class"].items():
            by[group(part)] += s
        by["unattributed"] += r["unattributed_s"]
    n = len(runs)
    execs = sum(r["execs"].get("cni-plugin", 0) for r in runs.values())
    top = sorted(runs, key=lambda k: -runs[k]["cpu_s"])[:5]
    walls, cpus = [r["wall_s"] for r in runs.values()], [r["cpu_s"] for r in runs.values()]
    # A run's CPU as a fixed cost plus a cost per second it lasts: what shortening runs buys.
    fit = statistics.linear_regression(walls, cpus) if n >= 3 and len(set(walls)) > 1 else None
    return {
        "runs": n,
        "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
        "median_cpu_s_per_run": round(statistics.median(r["cpu_s"] for r in runs.values()), 2),
        "cpu_per_wall": round(cpu / wall, 3) if wall else None,
        "by_class": {p: {"cpu_s": round(s, 2), "share": round(s / cpu, 3) if cpu else None,
                         "per_run_s": round(s / n, 3), "per_wall_s": round(s / wall, 4)}
                     for p, s in by.most_common()},
        "fit": fit and {"fixed_cpu_s": round(fit.intercept, 3),
                        "cpu_ms_per_wall_s": round(1000 * fit.slope, 1),
                        "r": round(statistics.correlation(walls, cpus), 2)},
        "cni_plugin_execs": execs,
        "cpu_ms_per_cni_plugin_exec": round(1000 * by["cni-plugin"] / execs, 1) if execs else None,
        "most_expensive": [{"scenario": k, "cpu_s": runs[k]["cpu_s"], "wall_s": runs[k]["wall_s"],
                            "top": dict(list(runs[k]["by_class"].items())[:4])} for k in top],
    }


def usage(msg: str) -> SystemExit:
    print(f"bench_cpu: {msg}", file=sys.stderr)
    return SystemExit(2)


def plan(args) -> tuple[list[str], str]:
    """The scenarios to run and the warm-up's; one line and exit 2 for bad input."""
    from cnikit import scenarios
    from cnikit.errors import UsageError
    from cnikit.targets import builtin, builtin_names

    if args.profile not in builtin_names():
        raise usage(f"unknown profile {args.profile!r}; one of {', '.join(builtin_names())}")
    target = builtin(args.profile)
    try:
        wanted = args.scenario or (QUICK if args.quick else scenarios.names())
        chosen = [n for n in wanted if target.runs(scenarios.get(n))]
    except UsageError as e:
        raise usage(str(e)) from None
    if args.scenario and len(chosen) < len(wanted):
        raise usage(f"{args.profile} does not run {', '.join(sorted(set(wanted) - set(chosen)))}"
                    f" (another address family)")
    return chosen, WARMUP if target.runs(scenarios.get(WARMUP)) else chosen[0]


def idle_floor(proc: Child, spec: dict) -> dict:
    answer = proc.ask(spec)
    rates = dict(sorted(answer["by_class"].items(), key=lambda kv: -kv[1]))
    return {"seconds": spec["idle"], "verdict": answer["record"]["verdict"],
            "cpu_ms_per_s": rates, "total_cpu_ms_per_s": round(sum(rates.values()), 1)}


def column(proc: Child, spec: dict, names: list[str], warmup: str) -> dict:
    # A fresh process's first run builds moto's backends and parses EC2's model: paid once
    # per worker, so measured apart from the runs.
    warm = proc.run({**spec, "scenario": warmup})
    print(f"warm-up {warmup}: {warm['cpu_s']:.1f} s CPU", file=sys.stderr)
    runs = {}
    for i, name in enumerate(names, 1):
        runs[name] = r = proc.run({**spec, "scenario": name})
        print(f"[{i}/{len(names)}] {name}: {r['verdict']} {r['wall_s']:.1f} s wall, "
              f"{r['cpu_s']:.1f} s CPU, unattributed {r['unattributed_s']:.2f}",
              file=sys.stderr, flush=True)
    return {"process_startup": proc.startup,
            "warmup": {"scenario": warmup, "cpu_s": warm["cpu_s"], "by_class": warm["by_class"],
                       "extra_cpu_s": round(warm["cpu_s"] - runs[warmup]["cpu_s"], 2)
                       if warmup in runs else None},
            "scenarios": runs, "totals": summarize(runs)}


def main() -> int:
    if sys.argv[1:] == ["--child"]:
        return child()
    ap = argparse.ArgumentParser(description="Where a scenario run's CPU goes.")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--profile", default="hardened")
    ap.add_argument("--scenario", action="append", help="this scenario only (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--idle", type=float, metavar="S",
                    help="only the floor: a quiet two-node cluster for S seconds")
    args = ap.parse_args()
    if args.idle is not None and args.idle <= 0:
        raise usage(f"--idle must be positive, got {args.idle}")
    out: dict = {"bench": "cpu", "quick": args.quick, "profile": args.profile, "seed": args.seed}
    if os.geteuid() != 0:
        out.update(error="needs root (network namespaces)")
        print(json.dumps(out))
        return 0
    names, warmup = plan(args)
    out["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                      "date": time.strftime("%Y-%m-%d")}
    root = tempfile.mkdtemp(prefix="bench-cpu-")
    spec = {"seed": args.seed, "target": args.profile, "root": root}
    proc = Child()
    try:
        if args.idle is not None:
            out["idle"] = idle_floor(proc, {**spec, "idle": args.idle})
        else:
            out.update(column(proc, spec, names, warmup))
            out["median_cpu_s_per_run"] = out["totals"]["median_cpu_s_per_run"]
            out["cpu_per_wall"] = out["totals"]["cpu_per_wall"]
    finally:
        proc.close()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
