"""cnikit.forkserver: a program forked warm runs as `python -m` would run it, and is handled
as a subprocess is (status, signals, timeouts); the server ends with the process that
started it; the kit's daemon is forked from it, or exec'd when CNIKIT_FORKSERVER=0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cnikit import forkserver
from cnikit.daemon.process import DaemonProcess
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests.unit.forkprobe"


@pytest.fixture(scope="module")
def server():
    # The probe is importable by the server wherever pytest was started from.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)
    try:
        s = forkserver.ForkServer((PROBE,))
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    yield s
    s.close()


def run(server, *args, stdin: bytes = b"", env=None, timeout=20):
    """Fork the probe with pipes for its stdio: (returncode, stdout, stderr)."""
    fds = [os.pipe() for _ in range(3)]
    child = server.spawn([sys.executable, "-m", PROBE, *args], PROBE,
                         env if env is not None else {"PROBE": "yes"},
                         stdin=fds[0][0], stdout=fds[1][1], stderr=fds[2][1])
    for fd in (fds[0][0], fds[1][1], fds[2][1]):
        os.close(fd)
    with os.fdopen(fds[0][1], "wb") as w:
        w.write(stdin)
    with os.fdopen(fds[1][0], "rb") as out, os.fdopen(fds[2][0], "rb") as err:
        stdout, stderr = out.read(), err.read()
    return child.wait(timeout), stdout.decode(), stderr.decode(), child


def test_a_forked_program_runs_as_python_m_would(server):
    code, out, err, child = run(server, "describe", "x y", stdin=b"hello")
    assert code == 0, err
    seen = json.loads(out)
    assert seen == {"argv": ["describe", "x y"], "name": "__main__", "probe": "yes",
                    "home": None, "session_leader": True, "stdin": "hello"}
    assert "RuntimeWarning" not in err  # not run a second time beside its preloaded copy
    assert child.cpu is not None and child.cpu >= 0


@pytest.mark.parametrize(("args", "code", "stderr"), [
    (["exit", "3"], 3, ""),
    (["message"], 1, "probe: bad input"),
    (["raise"], 1, "RuntimeError: probe failed"),
])
def test_exit_status_and_what_it_printed(server, args, code, stderr):
    got, _, err, _ = run(server, *args)
    assert got == code
    assert stderr in err


def test_non_daemon_threads_finish_before_it_exits(server):
    code, out, err, _ = run(server, "thread")
    assert (code, out) == (0, "thread done\n"), err


def test_signals_timeouts_and_poll(server):
    r, w = os.pipe()
    child = server.spawn([sys.executable, "-m", PROBE, "pause"], PROBE, {}, stdout=w)
    os.close(w)
    with os.fdopen(r, "rb") as out:
        assert out.readline() == b"paused\n"
        assert child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.05)
        os.killpg(child.pid, signal.SIGTERM)  # its own session: the group is its pid
        assert child.wait(20) == -signal.SIGTERM
    assert child.poll() == -signal.SIGTERM
    child.kill()  # gone already: nothing happens


def test_an_unknown_module_fails_like_python_m(server):
    r, w = os.pipe()
    child = server.spawn([sys.executable, "-m", "tests.unit.no_such_probe"],
                         "tests.unit.no_such_probe", {}, stderr=w)
    os.close(w)
    with os.fdopen(r, "rb") as err:
        text = err.read().decode()
    assert child.wait(20) == 1
    assert "No module named tests.unit.no_such_probe" in text


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    # A kit process that starts a server, prints its pid and is then killed outright.
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from cnikit import forkserver
        s = forkserver.ForkServer(("json",))
        print(s.proc.pid, flush=True)
        signal.pause()
    """)
    kit = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        pid = int(kit.stdout.readline())
        assert Path(f"/proc/{pid}").exists()
    finally:
        kit.kill()
        kit.wait()
    # Not our child: it is gone once /proc no longer has it, or it is a zombie of init's.
    wait_for(lambda: not Path(f"/proc/{pid}").exists()
             or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
             timeout=20, what="the fork server to exit with its kit")


def test_the_kit_daemon_is_forked_and_an_env_switch_execs_it(tmp_path, monkeypatch):
    def started(state):
        d = DaemonProcess(tmp_path / state, env={"CNIKIT_EC2_ENDPOINT": "http://127.0.0.1:1"})
        d.start(wait=0)
        try:
            # Up once it has logged something (it retries EC2 and the IMDS it cannot reach).
            wait_for(lambda: d.log_path.exists() and d.log_path.stat().st_size > 0,
                     timeout=20, what="the daemon's first log line")
            return type(d.proc), d.tail(10)
        finally:
            d.stop()
            assert not d.alive()

    kind, log = started("forked")
    assert kind is forkserver.Forked
    assert "Traceback" not in log and "RuntimeWarning" not in log
    monkeypatch.setenv(forkserver.ENV_SWITCH, "0")
    kind, log = started("execd")
    assert kind is subprocess.Popen
    assert "Traceback" not in log
