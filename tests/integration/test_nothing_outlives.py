"""Nothing a test session starts outlives it, however it ends: a pytest session killed with
SIGKILL (its whole process group), or one of its xdist workers killed, leaves no daemon, no
prober, no LocalStack, no namespace and no run or state directory behind, with no other run
on the machine to clean up after it (cnikit.reaper)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cnikit import runtime
from cnikit.fabric import netns
from tests.integration.conftest import needs_root, reaper_of, wait_until

pytestmark = [pytest.mark.root, needs_root]

# The inner session's test: a cluster with pods (daemons, their state, a prober), and with
# `localstack` a LocalStack, then it says what it made and waits to be killed.
INNER = textwrap.dedent('''
    import json, os, time
    from pathlib import Path

    def test_makes_things_and_waits(cluster):
        c = cluster(nodes=2, pods=2)
        ls = None
        if os.environ.get("WITH_LOCALSTACK"):
            from cnikit.cloud.localstack import LocalStackProcess
            ls = LocalStackProcess().start()
        made = {"run_id": c.fabric.rid, "pid": os.getpid(),
                "localstack": ls._proc.pid if ls else None,
                "localstack_dir": ls._dir.name if ls else None}
        Path(os.environ["MADE"]).write_text(json.dumps(made))
        end = time.monotonic() + 300  # bounded: the outer test kills us long before
        while time.monotonic() < end and not Path(os.environ["MADE"] + ".never").exists():
            time.sleep(0.2)
''')


def _descendants(root: int) -> set[int]:
    """Every process whose parent chain leads to root, root included."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in out} - out
        out |= new
        grew = bool(new)
    return out


def _alive(pids: dict[int, str]) -> list[int]:
    return [p for p, start in pids.items()
            if runtime.process_start_time(p) == start and not runtime.is_zombie(p)]


def _leftovers(rid: str, pids: dict[int, str]) -> dict:
    return {k: v for k, v in {
        "processes": _alive(pids),
        "namespaces": netns.names(f"ck-{rid}-"),
        "run dir": (runtime.RUN_ROOT / rid).exists(),
        "state dir": runtime.shm_dir(rid).exists(),
    }.items() if v}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill", ["session", "worker"])
def test_a_killed_session_leaves_nothing(kill, tmp_path):
    from cnikit.cloud.localstack import localstack_python

    with_localstack = kill == "session" and localstack_python() is not None
    (tmp_path / "test_inner.py").write_text(INNER)
    made_file = tmp_path / "made.json"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
            "-o", "timeout=300", "test_inner.py"] + (["-n", "1"] if kill == "worker" else [])
    env = {**os.environ, "MADE": str(made_file),
           "WITH_LOCALSTACK": "1" if with_localstack else ""}
    session = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: made_file.exists() or session.poll() is not None, 180,
                   what="the inner test to make its cluster")
        assert session.poll() is None, "the inner session ended before it was killed"
        made = json.loads(made_file.read_text())
        rid = made["run_id"]
        owner = made["pid"]  # the process that runs the test: pytest, or the xdist worker
        assert netns.names(f"ck-{rid}-") and reaper_of(owner) is not None
        # What the test's process started (its reaper too, which must end when done), and
        # what runs in the run's namespaces.
        pids = {p: runtime.process_start_time(p)
                for p in _descendants(owner) | set(_processes_in_run(rid))}
        if made["localstack"]:
            assert made["localstack"] in _descendants(owner)
        pids = {p: s for p, s in pids.items() if s is not None}
        if kill == "session":
            os.killpg(session.pid, signal.SIGKILL)  # pytest and its group, nothing else
        else:
            os.kill(owner, signal.SIGKILL)  # the worker only: the controller goes on
        wait_until(lambda: not _leftovers(rid, pids), 60,
                   what=f"nothing left of run {rid} ({_leftovers(rid, pids)})")
        if made["localstack_dir"]:
            wait_until(lambda: not Path(made["localstack_dir"]).exists(), 30,
                       what="LocalStack's temp dir to go")
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
        session.wait(30)


def _processes_in_run(rid: str) -> list[int]:
    from cnikit.fabric.cleanup import processes_in

    return processes_in(netns.names(f"ck-{rid}-"))
