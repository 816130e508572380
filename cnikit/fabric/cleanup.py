"""Removing what dead runs left: processes, namespaces, run directories, daemon state.

Only a run whose owner process is gone counts as dead (`runtime.live_run_ids()`); a live
run's things (other engineers and CI run concurrently on one machine) and anything whose
name is not the kit's are never touched. Processes are matched by pid *and* start time, so
a recycled pid is left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cnikit import runtime
from cnikit.fabric import names, netns

PIDS_FILE = "pids"


def record_process(run_dir: Path, pid: int) -> None:
    """Remember a process the run started, so cleanup can kill it if the run dies."""
    start = runtime.process_start_time(pid)
    with open(Path(run_dir) / PIDS_FILE, "a") as f:
        f.write(f"{pid} {start}\n")


def _recorded(run_dir: Path) -> list[tuple[int, str]]:
    try:
        lines = (Path(run_dir) / PIDS_FILE).read_text().split("\n")
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out.append((int(parts[0]), parts[1]))
    return out


def kill_pids(pids: list[int], grace: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL whatever still runs after `grace` seconds; returns those signalled."""
    return _kill(pids, grace) if pids else []


def _kill(pids: list[int], grace: float = 2.0) -> list[int]:
    killed = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            killed.append(pid)
    end = time.monotonic() + grace
    alive = list(killed)
    while alive and time.monotonic() < end:
        alive = [p for p in alive
                 if runtime.process_start_time(p) is not None and not runtime.is_zombie(p)]
        if alive:
            time.sleep(0.02)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return killed


def kill_recorded(run_dir: Path) -> list[int]:
    """Kill the run's recorded processes that are still the same processes."""
    pids = [pid for pid, start in _recorded(run_dir)
            if pid != os.getpid() and runtime.process_start_time(pid) == start]
    return _kill(pids)


def processes_in(ns_names: list[str]) -> list[int]:
    """Pids whose network namespace is one of these kit namespaces."""
    inodes = set()
    for name in ns_names:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(netns.netns_path(name)).st_ino)
    if not inodes:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    out.append(int(entry))
    return out


def shm_dirs() -> dict[str, Path]:
    """run id -> the run's daemon state directory (runtime.shm_dir) that exists now."""
    prefix = runtime.shm_dir("").name
    out = {}
    with contextlib.suppress(OSError):
        for d in runtime.SHM_ROOT.iterdir():
            rid = d.name.removeprefix(prefix)
            if d.name.startswith(prefix) and len(rid) == runtime.RUN_ID_LEN and rid.isalnum() \
                    and d.is_dir():
                out[rid] = d
    return out


@dataclass
class Report:
    runs: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)  # daemon state in SHM_ROOT

    def __bool__(self) -> bool:
        return bool(self.runs or self.namespaces or self.processes or self.directories)

    def summary(self) -> str:
        return (f"removed {len(self.namespaces)} namespaces, killed {len(self.processes)} "
                f"processes, removed {len(self.directories)} state directories, "
                f"{len(self.runs)} dead runs ({', '.join(self.runs) or 'none'})")


def remove_dead_runs(dry_run: bool = False, only: set[str] | None = None) -> Report:
    """Remove every leftover of every dead run; never a live run's. dry_run: only report.
    only: of these run ids alone (a reaper's: its owner's runs)."""
    live = runtime.live_run_ids()

    def dead(rid: str | None) -> bool:
        return rid is not None and rid not in live and (only is None or rid in only)

    report = Report()
    dead_dirs = []
    if runtime.RUN_ROOT.is_dir():
        for d in runtime.RUN_ROOT.iterdir():
            if d.is_dir() and dead(d.name) and not runtime.run_is_alive(d):
                dead_dirs.append(d)
    dead_ns = [n for n in netns.names(f"{runtime.NAME_PREFIX}-") if dead(names.run_id_of(n))]
    dead_shm = {rid: d for rid, d in shm_dirs().items() if dead(rid)}
    # Re-check right before acting: a run that claimed its id since `live` was read is alive.
    live = runtime.live_run_ids()
    dead_ns = [n for n in dead_ns if dead(names.run_id_of(n))]
    dead_dirs = [d for d in dead_dirs if dead(d.name)]
    dead_shm = {rid: d for rid, d in dead_shm.items() if dead(rid)}
    if dry_run:
        report.namespaces = dead_ns
        recorded = [pid for d in dead_dirs for pid, start in _recorded(d)
                    if runtime.process_start_time(pid) == start]
        # A recorded daemon also runs in a dead namespace: list each process once.
        report.processes = sorted(set(recorded) | set(processes_in(dead_ns)))
        report.directories = [str(d) for d in dead_shm.values()]
        report.runs = sorted({d.name for d in dead_dirs} | {names.run_id_of(n) for n in dead_ns}
                             | set(dead_shm))
        return report
    killed = set()
    for d in dead_dirs:
        killed.update(kill_recorded(d))
    killed.update(_kill([p for p in processes_in(dead_ns) if p not in killed]))
    report.processes = sorted(killed)
    for n in dead_ns:
        if netns.remove(n):
            report.namespaces.append(n)
    for d in dead_shm.values():
        shutil.rmtree(d, ignore_errors=True)
        report.directories.append(str(d))
    for d in dead_dirs:
        shutil.rmtree(d, ignore_errors=True)
        report.runs.append(d.name)
    report.runs = sorted(set(report.runs) | {names.run_id_of(n) for n in report.namespaces}
                         | set(dead_shm))
    return report


class Interrupted(KeyboardInterrupt):
    """SIGTERM turned into an exception so context managers unwind and clean up."""


@contextlib.contextmanager
def cleanup_on_signals(on_signal=None) -> Iterator[None]:
    """Make SIGTERM (and SIGHUP) unwind like Ctrl-C, for the duration of the body. Ctrl-C
    (SIGINT) unwinds too even where it was ignored: a shell starts background jobs of a
    script with SIGINT ignored, and `kill -INT` must still clean up. `on_signal()`, if
    given, runs first on any of them (say, arming a report of a teardown that hangs)."""
    def raise_interrupt(signum, _frame):
        if on_signal is not None:
            on_signal()
        raise Interrupted(f"signal {signum}")

    def interrupt(signum, frame):
        if on_signal is not None:
            on_signal()
        signal.default_int_handler(signum, frame)

    old = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    if on_signal is not None or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
