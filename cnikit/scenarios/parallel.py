"""Scenario runs side by side (`cnikit matrix --jobs`, `cnikit certify --jobs`): in worker
processes (cnikit.scenarios.worker), at most `jobs` at once; and the deterministic share
of them one CI runner takes (--shard)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from cnikit.errors import UsageError
from cnikit.scenarios.cpu_gate import CpuGate, cores


def run_record(result, scenario: str, seed: int, report_root: Path) -> dict:
    """What a certificate or a matrix keeps of one RunResult (the report path relative to
    report_root)."""
    from cnikit.check.exposure import label

    report = result.report.get("html") or result.report.get("json")
    if report:
        try:
            report = str(Path(report).resolve().relative_to(Path(report_root).resolve()))
        except ValueError:
            report = str(report)
    return {
        "scenario": scenario,
        "seed": seed,
        "verdict": result.verdict,
        "expected": getattr(result, "expected", None),
        "seconds": result.seconds,
        "report": report,
        "precondition": getattr(result, "precondition", None),
        "too_slow": getattr(result, "too_slow", None),
        # The time scale the verdict came from, and the faster ones the machine was too slow
        # for first (cnikit.scenarios.engine.adapt).
        "scale": (getattr(result, "params", None) or {}).get("scale"),
        "attempts": [{k: a.get(k) for k in ("scale", "factor", "verdict", "too_slow", "seconds")}
                     for a in getattr(result, "attempts", None) or []],
        "exercised": getattr(result, "exercised", result.verdict in ("holds", "violation")),
        "exposure": getattr(result, "exposure", None) or {},
        "cost": getattr(result, "cost", None) or [],
        "label": label(result.verdict, getattr(result, "exposure", None)),
        "error": result.error,
        "evidence": result.evidence(5),
        "run_id": (getattr(result, "params", None) or {}).get("run_id"),
    }


# Runs at once by default, per core this process may use, and no more than the machine's
# available memory holds: 20 runs at once took 4.7 GB, about 235 MB each (2026-12-07).
PER_CORE = 10
RUN_MB = 300


def available_mb() -> int | None:
    """MemAvailable of /proc/meminfo, in MB (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_jobs() -> int:
    """At most this many runs at once by default (PER_CORE per core, RUN_MB each); the CPU gate
    (cnikit.scenarios.cpu_gate) starts fewer while the cores have no room. On 2 cores,
    since the daemon is forked warm, the whole matrix (127 runs) took 133 s so (one start
    every 0.4 s), against 189 s at five per core (one every 0.75 s) and 212 s at five per
    core with the same gap, every verdict the same (2026-12-07)."""
    mb = available_mb()
    by_memory = 64 if mb is None else mb // RUN_MB
    return max(1, min(PER_CORE * cores(), by_memory, 64))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'I/N' (1 <= I <= N) -> (I, N); None for no sharding."""
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard must be I/N (for example 2/3), not {text!r}") from None
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text}: I must be between 1 and N")
    return i, n


def take_shard(items: list, shard: tuple[int, int] | None) -> list:
    """Every N-th item from the I-th: the shards of a plan are disjoint and together the
    whole plan, whatever runner takes which."""
    if shard is None:
        return list(items)
    i, n = shard
    return [x for k, x in enumerate(items) if k % n == i - 1]


def target_ref(target) -> str:
    """What a worker process resolves the target from: its file, or a built-in's name."""
    return str(target.source) if getattr(target, "source", None) else target.name


class WorkerDied(Exception):
    pass


def _error_record(spec: dict, why: str) -> dict:
    return {"scenario": spec["scenario"], "seed": spec["seed"], "verdict": "error",
            "expected": None, "seconds": 0.0, "report": None, "precondition": None,
            "exercised": False, "error": f"worker: {why}"[:500], "evidence": [], "run_id": None}


class Worker:
    """One `cnikit.scenarios.worker --serve` process, in its own session (so Ctrl-C stops
    them all, and the kit's cleanup removes what a killed one left: its run ids are its own)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cnikit.scenarios.worker", "--serve"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._err: deque[str] = deque(maxlen=20)  # its last words, should it die
        threading.Thread(target=self._drain, name="worker-stderr", daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            if line.strip():
                self._err.append(line.rstrip())

    def call(self, spec: dict) -> dict:
        """The run's record ({"worker_error": why} for a spec it cannot run); WorkerDied(why)
        when the worker dies on the way."""
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, ValueError, OSError):
            line = ""
        if not line:
            code = self.proc.wait()
            raise WorkerDied(self._err[-1] if self._err else f"exit {code}")
        return json.loads(line)

    def close(self) -> None:
        """End it at its next read (EOF); it has no run in flight then."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


class Pool:
    """At most `jobs` workers, each taking one run after another."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._lock = threading.Lock()

    def run(self, spec: dict) -> dict:
        with self._lock:
            w = self._idle.pop() if self._idle else None
        if w is None:
            w = Worker()
            with self._lock:
                self._all.add(w)
        try:
            rec = w.call(spec)
        except WorkerDied as e:  # the next run gets a new worker
            with self._lock:
                self._all.discard(w)
            return _error_record(spec, str(e))
        with self._lock:
            self._idle.append(w)
        if "worker_error" in rec:
            return _error_record(spec, f"cnikit: {rec['worker_error']}")
        return rec

    def close(self) -> None:
        """End the idle workers (every run done)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._all.difference_update(idle)
        for w in idle:
            w.close()

    def stop(self) -> None:
        """Stop every worker, busy or not: each tears its run down on SIGTERM."""
        with self._lock:
            workers, self._idle = list(self._all), []
            self._all.clear()
        for w in workers:
            w.signal(signal.SIGTERM)
        for w in workers:
            try:
                w.proc.wait(30)
            except subprocess.TimeoutExpired:
                w.signal(signal.SIGKILL)


def run_specs(items: list, spec_of: Callable[[object], dict], jobs: int,
              on_start: Callable[[object], None] | None = None,
              on_done: Callable[[object, dict], None] | None = None,
              seconds_of: Callable[[object], float | None] | None = None,
              gate: CpuGate | None = None,
              key_of: Callable[[object], tuple[str, str]] | None = None) -> list[dict]:
    """One run per item (spec_of(item): the worker's JSON spec), at most `jobs` at once and
    as many as the machine's CPU has room for (cnikit.scenarios.cpu_gate; `gate` replaces
    it); the records in the items' order. seconds_of(item): how long its run took last time
    (None: unknown); the longest start first, so that the last runs to end are short ones
    (in the plan's order the 27-run matrix started its 51 s random-chaos run last: 117 s in
    all). key_of(item): its (scenario, target name); where seconds_of knows nothing, the
    machine's record of past runs does (cnikit.scenarios.durations), and these runs' times
    go into it."""
    from cnikit.scenarios import durations

    if key_of is not None:
        seconds_of = _or_recorded(seconds_of, key_of, durations.load())
    pool = Pool(jobs)
    gate = gate or CpuGate(jobs)
    order = longest_first(items, seconds_of) if seconds_of is not None and jobs > 1 \
        else list(range(len(items)))
    records: list = [None] * len(items)
    running = [0]
    cond = threading.Condition()

    def one(i: int) -> None:
        try:
            if on_start is not None:
                on_start(items[i])
            rec = pool.run(spec_of(items[i]))
            if on_done is not None:
                on_done(items[i], rec)
            records[i] = rec
        except BaseException as e:  # noqa: BLE001 - handed to the main thread below
            records[i] = e
        finally:
            with cond:
                running[0] -= 1
                cond.notify_all()

    try:
        for i in order:
            # Bounded waits: a signal is handled by the main thread when it next wakes
            # (Ctrl-C, SIGTERM: stop every worker), never while it blocks for a whole run.
            with cond:
                while not gate.admit(running[0]):
                    cond.wait(0.25)
                running[0] += 1
            threading.Thread(target=one, args=(i,), name="runs", daemon=True).start()
        with cond:
            while running[0]:
                cond.wait(0.5)
    except BaseException:
        pool.stop()
        raise
    pool.close()
    failed = next((r for r in records if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    if key_of is not None:
        durations.save([(*key_of(item), rec.get("seconds"))
                        for item, rec in zip(items, records, strict=True)])
    return records


def _or_recorded(past, key_of, known: dict) -> Callable[[object], float | None]:
    """seconds_of: `past`'s answer (None: no past), else the machine's record's."""
    from cnikit.scenarios import durations

    def seconds(item) -> float | None:
        return (past(item) if past is not None else None) or durations.guess(known,
                                                                             *key_of(item))

    return seconds


def longest_first(items: list, seconds_of: Callable[[object], float | None]) -> list[int]:
    """The items' indexes, the longest-known first; unknown ones after them, in order."""
    known = [(seconds_of(item), i) for i, item in enumerate(items)]
    return [i for _, i in sorted(known, key=lambda k: (k[0] is None, -(k[0] or 0.0), k[1]))]


def past_seconds(report_dir: Path | None) -> float | None:
    """How long the run whose report is in `report_dir` took (None: no readable report)."""
    if report_dir is None:
        return None
    try:
        with open(Path(report_dir) / "report.json") as f:
            seconds = json.load(f).get("seconds")
    except (OSError, ValueError, AttributeError):
        return None
    return float(seconds) if isinstance(seconds, int | float) else None


def run_dir(root: Path, scenario: str, seed: int) -> Path:
    """Where a certification keeps one run's report."""
    return Path(root) / scenario / f"seed{seed}"


def run_all(todo: list, target, root: Path, jobs: int, ec2: str, ec2_endpoint: str | None,
            on_start: Callable[[object], None] | None = None,
            on_done: Callable[[dict], None] | None = None) -> list[dict]:
    """A certification's records in plan order, running `jobs` at once."""
    ref = target_ref(target)
    return run_specs(todo, lambda p: {"scenario": p.scenario, "seed": p.seed, "target": ref,
                                      "root": str(root), "ec2": ec2,
                                      "ec2_endpoint": ec2_endpoint},
                     jobs, on_start, None if on_done is None else (lambda _p, rec: on_done(rec)),
                     seconds_of=lambda p: past_seconds(run_dir(root, p.scenario, p.seed)),
                     key_of=lambda p: (p.scenario, target.name))
