"""Cleanup: a run killed with SIGKILL leaves namespaces; the next run (or `cnikit cleanup`)
removes them, never a live run's and never anything that is not the kit's. SIGTERM and
Ctrl-C clean up on the way out. Bad input: one line, exit code 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cnikit import runtime
from cnikit.fabric import netns
from cnikit.fabric.cleanup import remove_dead_runs
from tests.integration.conftest import crash, needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]
# A dead run's leftovers are any run's to remove: a test that kills a run and then looks at
# what is left must not have another test's run start beside it (`make test` runs these alone).
EXCLUSIVE = pytest.mark.exclusive
CNIKIT = str(Path(sys.executable).with_name("cnikit"))
ROOT = str(Path(__file__).resolve().parents[2])
# Hang bounds, not speed goals: quiet, a teardown takes a second or two and a refused
# command well under one; a machine as busy as `make test-under-load`'s is many times slower.
HANG_S = 120.0


def start_hold(*args: str, **kw) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "cnikit.fabric.hold", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"hold failed: {proc.stderr.read()}")
    return proc, json.loads(line)


@EXCLUSIVE
def test_sigkill_leaves_namespaces_and_the_next_run_removes_them(make_fabric):
    proc, ready = start_hold("--nodes", "2", "--pods", "2")
    rid = ready["run_id"]
    assert len(ready["namespaces"]) == 1 + 2 + 4
    crash(proc)
    assert netns.names(f"ck-{rid}-") == ready["namespaces"]  # left behind
    # Something still running in a dead run's namespace (a daemon nobody recorded).
    straggler = subprocess.Popen(["nsenter", f"--net=/run/netns/ck-{rid}-n0", "sleep", "300"])
    wait_until(lambda: os.stat(f"/proc/{straggler.pid}/ns/net").st_ino
               == os.stat(f"/run/netns/ck-{rid}-n0").st_ino, 5, what="straggler in the netns")

    fabric = make_fabric(nodes=1)  # the next run starts clean
    assert netns.names(f"ck-{rid}-") == []
    assert straggler.wait(5) is not None
    assert not (runtime.RUN_ROOT / rid).exists()
    assert netns.names(f"ck-{fabric.rid}-")  # and its own namespaces are there


@EXCLUSIVE
def test_cleanup_command_spares_live_runs_and_foreign_namespaces(make_fabric):
    live = make_fabric(nodes=1)
    proc, ready = start_hold("--nodes", "1", "--pods", "1")
    dead = ready["run_id"]
    crash(proc)
    foreign = ["ck-notarun", "zz-cnikit-test-foreign"]
    for name in foreign:
        os.close(netns.create(name))
    try:
        dry = subprocess.run([CNIKIT, "cleanup", "--dry-run"], capture_output=True, text=True,
                             timeout=HANG_S)
        assert dry.returncode == 0 and f"namespace ck-{dead}-vpc" in dry.stdout, dry.stderr
        assert live.rid not in dry.stdout and netns.names(f"ck-{dead}-")  # nothing removed
        out = subprocess.run([CNIKIT, "cleanup"], capture_output=True, text=True, timeout=HANG_S,
                             env={**os.environ, "PATH": "/nonexistent"})  # needs no `ip`
        assert out.returncode == 0, out.stderr
        assert dead in out.stdout and netns.names(f"ck-{dead}-") == []
        assert live.rid not in out.stdout
        assert len(netns.names(f"ck-{live.rid}-")) == 1 + 1
        assert all(netns.exists(name) for name in foreign)
        assert not remove_dead_runs()  # nothing left to do
    finally:
        for name in foreign:
            netns.remove(name)


@EXCLUSIVE
def test_cleanup_lists_each_process_once_and_removes_dead_state_dirs(make_fabric):
    from cnikit.fabric.cleanup import record_process

    live = make_fabric(nodes=1)
    proc, ready = start_hold("--nodes", "1", "--pods", "1")
    dead = ready["run_id"]
    crash(proc)
    # A daemon the dead run recorded, still running in its node namespace, and the daemons'
    # state directory on /dev/shm (what a cluster leaves).
    daemon = subprocess.Popen(["nsenter", f"--net=/run/netns/ck-{dead}-n0", "sleep", "300"])
    wait_until(lambda: os.stat(f"/proc/{daemon.pid}/ns/net").st_ino
               == os.stat(f"/run/netns/ck-{dead}-n0").st_ino, 5, what="daemon in the netns")
    record_process(runtime.RUN_ROOT / dead, daemon.pid)
    kept = [runtime.shm_dir(live.rid), runtime.SHM_ROOT / "cnikit-notarun"]
    for d in [runtime.shm_dir(dead), *kept]:
        d.mkdir()
        (d / "ipam.json").write_text("{}")
    try:
        dry = subprocess.run([CNIKIT, "cleanup", "--dry-run"], capture_output=True, text=True,
                             timeout=HANG_S)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines().count(f"process {daemon.pid}") == 1, dry.stdout
        assert f"directory {runtime.shm_dir(dead)}\n" in dry.stdout, dry.stdout
        assert runtime.shm_dir(dead).exists() and daemon.poll() is None  # a dry run
        out = subprocess.run([CNIKIT, "cleanup"], capture_output=True, text=True, timeout=HANG_S)
        assert out.returncode == 0 and dead in out.stdout, out.stdout
        assert daemon.wait(5) is not None
        assert not runtime.shm_dir(dead).exists() and all(d.exists() for d in kept)
    finally:
        daemon.kill()
        daemon.wait(5)
        for d in [runtime.shm_dir(dead), *kept]:
            shutil.rmtree(d, ignore_errors=True)


def test_sigterm_cleans_up_on_the_way_out():
    proc, ready = start_hold("--nodes", "1", "--pods", "2")
    rid = ready["run_id"]
    assert netns.names(f"ck-{rid}-")
    proc.send_signal(signal.SIGTERM)
    assert exit_code(proc) != 0
    assert netns.names(f"ck-{rid}-") == []
    assert not (runtime.RUN_ROOT / rid).exists()
    assert "Traceback" not in proc.stderr.read()


def exit_code(proc: subprocess.Popen, timeout: float = HANG_S) -> int:
    """proc's exit code; if it does not exit, what it said (a hanging teardown dumps its
    threads' stacks on stderr after cnikit.fabric.hold.TEARDOWN_REPORT_S)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"still running {timeout:g}s after the signal:\n{err[-6000:]}") \
            from None


def test_sigint_cleans_up_on_the_way_out():
    proc, ready = start_hold("--nodes", "1", "--pods", "1")
    proc.send_signal(signal.SIGINT)
    assert exit_code(proc) == 130
    assert netns.names(f"ck-{ready['run_id']}-") == []
    assert "Traceback" not in proc.stderr.read()


def test_sigint_cleans_up_even_when_started_with_sigint_ignored():
    # What a shell does to a script's background job (`cnikit ... &`): `kill -INT` must
    # still clean up.
    proc, ready = start_hold("--nodes", "1", "--pods", "1",
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    proc.send_signal(signal.SIGINT)
    assert exit_code(proc) == 130
    assert netns.names(f"ck-{ready['run_id']}-") == []


def one_line_exit_2(argv: list[str], **kw) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S, **kw)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


# A real non-root user that can read the clone, as a user running their own clone can. The
# clone (and the Python it runs) may sit where `nobody` cannot enter (under /root, in a
# `mktemp -d`): CAP_DAC_READ_SEARCH lets it read files and nothing else; it is still not root.
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
          "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def test_not_root_is_one_line_and_exit_2():
    assert "needs root" in one_line_exit_2(NOBODY + [CNIKIT, "cleanup"], cwd="/")
    assert "needs root" in one_line_exit_2(NOBODY + [sys.executable, "-m", "cnikit.fabric.hold"],
                                           cwd="/", env={**os.environ, "PYTHONPATH": ROOT})
    # Still not root: it cannot write where only root can.
    probe = NOBODY + [sys.executable, "-c", "open('/run/cnikit-nobody-probe', 'w')"]
    assert subprocess.run(probe, capture_output=True, timeout=HANG_S).returncode != 0
    assert not os.path.exists("/run/cnikit-nobody-probe")


def test_run_id_collision_is_one_line_and_exit_2(make_fabric):
    live = make_fabric(nodes=1)
    msg = one_line_exit_2([sys.executable, "-m", "cnikit.fabric.hold", "--run-id", live.rid])
    assert "already in use" in msg
    assert "must be 5 letters" in one_line_exit_2(
        [sys.executable, "-m", "cnikit.fabric.hold", "--run-id", "no!"])
    assert netns.names(f"ck-{live.rid}-")  # the live run was not touched
