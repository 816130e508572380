"""A private Docker Engine: Debian's `dockerd` (package docker.io) on a socket, data root,
exec root, pidfile and configuration file of its own, under a directory named by a run id,
with no iptables, no IP forwarding and no bridge. Nothing of the machine's own Docker, if it
has one, is used or touched. The tests of the docker runtime start one per session:

    with PrivateDockerd() as engine:
        os.environ["DOCKER_HOST"] = engine.url

or for one command: `python -m cnikit.containers.dockerd run -- ARGV...` (make compose-docker).

A supervisor process (`python -m cnikit.containers.dockerd supervise RUN_DIR DATA_ROOT`, in a
session of its own) owns the engine: it starts dockerd, says "ready", then waits on a pipe
whose write end only its owner holds. When the owner closes it, or dies by any means (the
kernel closes the pipe), the supervisor removes the engine's containers, stops dockerd (and the
containerd it started, and the shims), unmounts what is left under the engine's roots, removes
its directories, and removes the directories dockerd makes outside them (/run/containerd,
/run/docker/plugins) when they are empty, were not the machine's before (MADE), and no other private engine
lives. dockerd itself gets SIGTERM if the supervisor dies (PR_SET_PDEATHSIG); an engine whose
supervisor was SIGKILLed is removed by the next start's sweep.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cnikit import runtime
from cnikit.errors import EnvironmentProblem

ROOT = Path(os.environ.get("CNIKIT_DOCKERD_ROOT", "/run/cnikit-dockerd"))
DATA = Path(os.environ.get("CNIKIT_DOCKERD_DATA", "/var/lib/cnikit/dockerd"))
# Made by dockerd wherever its roots are (its plugin directory, containerd's shim sockets).
OUTSIDE = ("/run/docker/plugins", "/run/docker", "/run/containerd")
MADE = "made-outside.json"  # in ROOT: which of OUTSIDE the private engines made
PR_SET_PDEATHSIG = 1
MNT_DETACH = 2


def available() -> str | None:
    """None when a private dockerd can be started here, else the one-line reason why not."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed (make setup installs it: apt package docker.io)"
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    return None


def engine_hint() -> str:
    """Where a command that found no Docker engine gets one: this very command under the
    kit's private engine, spelt out to paste (absolute paths: it works from any directory),
    or why that cannot start here either."""
    import shlex

    why_not = available()
    if why_not:
        return f"the kit's private engine cannot start either: {why_not}"
    argv = list(sys.orig_argv)
    if len(argv) > 1 and os.path.isfile(argv[1]):  # a script such as .venv/bin/cnikit
        argv[1] = os.path.abspath(argv[1])
    wrapped = [sys.executable, "-m", "cnikit.containers.dockerd", "run", "--", *argv]
    return (f"or run this command under the kit's private engine: {shlex.join(wrapped)} "
            "(docs/containers.md, Docker Engine)")


class PrivateDockerd:
    """One private engine (see the module docstring); `url` is its DOCKER_HOST."""

    def __init__(self) -> None:
        self.run_id = runtime.new_run_id()
        self.run_dir = ROOT / self.run_id
        self.data_root = DATA / self.run_id
        self.socket_path = self.run_dir / "docker.sock"
        self.url = f"unix://{self.socket_path}"
        self.log_path = self.run_dir / "dockerd.log"
        self._proc: subprocess.Popen | None = None
        self._write: int | None = None

    def start(self, timeout: float = 90.0) -> PrivateDockerd:
        reason = available()
        if reason:
            raise EnvironmentProblem(reason)
        sweep_dead()
        read, write = os.pipe()  # non-inheritable: only the supervisor's stdin holds `read`
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cnikit.containers.dockerd", "supervise",
                 str(self.run_dir), str(self.data_root)],
                stdin=read, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            os.close(read)
        self._write = write
        line = _read_line(self._proc.stdout, timeout)
        if line != "ready":
            self.stop()
            raise EnvironmentProblem(f"dockerd did not start: {line or 'no answer'}")
        return self

    def stop(self, timeout: float = 90.0) -> None:
        """Close the pipe: the supervisor removes the engine and everything it made."""
        if self._write is not None:
            os.close(self._write)
            self._write = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
            with contextlib.suppress(OSError):
                self._proc.stdout.close()
            self._proc = None

    def __enter__(self) -> PrivateDockerd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _read_line(stream, timeout: float) -> str:
    """One line from the supervisor, or "" when it ends or says nothing before the deadline."""
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return "timed out"
        chunk = os.read(stream.fileno(), 4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").strip()


def _answers(sock: Path) -> bool:
    """GET /_ping on the engine's socket answers OK."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(str(sock))
        s.sendall(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        return s.recv(64).startswith(b"HTTP/1.1 200")
    return False


def _pdeathsig_term() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


# ---- the supervisor ------------------------------------------------------------------------

def supervise(run_dir: Path, data_root: Path) -> int:
    run_dir.mkdir(parents=True)
    data_root.mkdir(parents=True)
    runtime.write_owner(run_dir)
    (run_dir / "data-root").write_text(str(data_root))
    # "There before" means the machine's: a directory another private engine made (and
    # MADE lists) is the kit's, and goes with the last engine.
    made = _made()
    (run_dir / "before.json").write_text(json.dumps(
        {p: os.path.exists(p) and p not in made for p in OUTSIDE}))
    _write_made(made | {p for p in OUTSIDE if not os.path.exists(p)})
    (run_dir / "daemon.json").write_text("{}\n")  # not the machine's /etc/docker/daemon.json
    sock = run_dir / "docker.sock"
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log = open(run_dir / "dockerd.log", "wb")
    proc = None
    try:
        proc = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip-forward=false", "--bridge=none",
             "--config-file", str(run_dir / "daemon.json"), "-H", f"unix://{sock}",
             "--data-root", str(data_root), "--exec-root", str(run_dir / "exec"),
             "--pidfile", str(run_dir / "dockerd.pid")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_pdeathsig_term)
        deadline = time.monotonic() + 60
        while not _answers(sock):
            if proc.poll() is not None or time.monotonic() > deadline or stopping:
                tail = (run_dir / "dockerd.log").read_text(errors="replace").strip().splitlines()
                why = tail[-1][:300] if tail else f"exit {proc.poll()}"
                print(f"dockerd did not serve {sock}: {why}", flush=True)
                return 1
            time.sleep(0.05)
        print("ready", flush=True)
        with contextlib.suppress(OSError):  # nothing more for an owner that may be gone
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
        while not stopping and proc.poll() is None:
            with contextlib.suppress(InterruptedError):
                if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
                    break  # the owner closed the pipe, or died
        return 0
    finally:
        teardown(run_dir, data_root, proc)
        log.close()


def teardown(run_dir: Path, data_root: Path, proc: subprocess.Popen | None = None) -> None:
    """Remove one private engine and all it made (idempotent; proc: its dockerd, if ours)."""
    sock = run_dir / "docker.sock"
    if _answers(sock):
        with contextlib.suppress(Exception):
            import docker

            client = docker.DockerClient(base_url=f"unix://{sock}", timeout=30)
            for c in client.containers.list(all=True):
                with contextlib.suppress(Exception):
                    c.remove(force=True)
            client.close()
    marks = (str(run_dir).encode(), str(data_root).encode())
    pid = proc.pid if proc is not None else _pidfile(run_dir / "dockerd.pid")
    if proc is None and pid and not any(m in _cmdline(pid) for m in marks):
        pid = None  # the pid is another process's now
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        if proc is not None:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        else:
            _wait_gone([pid], 30)
    # containerd and its shims name the engine's roots on their command lines.
    left = [p for p, argv in _processes()
            if p != os.getpid() and b"cnikit.containers.dockerd" not in argv
            and any(m in argv for m in marks)]
    for p in left:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    _wait_gone(left, 10)
    _unmount_under((run_dir, data_root))
    try:
        before = json.loads((run_dir / "before.json").read_text())
    except (OSError, ValueError):
        before = {}
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(data_root, ignore_errors=True)
    _remove_outside(run_dir, before)


def _pidfile(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().strip())
    return None


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _processes():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                yield int(entry), Path(f"/proc/{entry}/cmdline").read_bytes()


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(not runtime.is_zombie(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _unmount_under(roots) -> None:
    """Detach every mount under roots, the deepest first (overlay layers, shm, netns)."""
    prefixes = tuple(str(r) + "/" for r in roots)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[4].encode().decode("unicode_escape") for line in lines]
    libc = ctypes.CDLL(None, use_errno=True)
    for point in sorted({p for p in points if p.startswith(prefixes)}, key=len, reverse=True):
        libc.umount2(point.encode(), MNT_DETACH)


def _remove_outside(run_dir: Path, before: dict) -> None:
    """The directories dockerd made outside its roots, if empty, not there before this
    engine, and no other private engine lives (its shims' sockets may come there)."""
    if any(d != run_dir and runtime.run_is_alive(d) for d in _engine_dirs()):
        return
    made = _made()
    for top in OUTSIDE:
        if before.get(top, True) is False and os.path.isdir(top):
            for d, _, _ in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(d)  # only an empty one
        if not os.path.exists(top):
            made.discard(top)
    _write_made(made)


def _made() -> set[str]:
    """The directories outside their roots that private engines made (MADE)."""
    with contextlib.suppress(OSError, ValueError):
        return set(json.loads((ROOT / MADE).read_text()))
    return set()


def _write_made(made: set[str]) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    if made:
        (ROOT / MADE).write_text(json.dumps(sorted(made)))
    else:
        (ROOT / MADE).unlink(missing_ok=True)


def _engine_dirs() -> list[Path]:
    with contextlib.suppress(OSError):
        return [d for d in ROOT.iterdir() if d.is_dir()]
    return []  # (MADE is a file: never taken for an engine)


def sweep_dead() -> list[str]:
    """Remove the private engines whose supervisor is gone (SIGKILLed): their run ids."""
    gone = []
    for d in _engine_dirs():
        if not runtime.run_is_alive(d):
            data = DATA / d.name
            with contextlib.suppress(OSError):
                data = Path((d / "data-root").read_text().strip())
            teardown(d, data)
            gone.append(d.name)
    return gone


def run_with_engine(argv: list[str]) -> int:
    """ARGV with DOCKER_HOST at a private engine started for it, removed after; its exit code."""
    try:
        engine = PrivateDockerd().start()
    except EnvironmentProblem as e:
        print(f"cnikit: {e}", file=sys.stderr)
        return 2
    try:
        return subprocess.run(argv, env={**os.environ, "DOCKER_HOST": engine.url}).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        engine.stop()


USAGE = """usage: python -m cnikit.containers.dockerd run -- ARGV...   (ARGV under a private engine)
       python -m cnikit.containers.dockerd supervise RUN_DIR DATA_ROOT   (internal)"""


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "supervise":
        return supervise(Path(argv[1]), Path(argv[2]))
    if len(argv) >= 3 and argv[:2] == ["run", "--"]:
        return run_with_engine(argv[2:])
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
