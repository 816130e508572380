"""The kit's own Python programs forked from a warm process instead of started cold.

A run starts the reference daemon on every node, again at every restart the nemesis makes,
and the prober once. Each was `python -m ...`: an interpreter start and ~80 ms of imports,
about 0.1 s of CPU, which was half of all a daemon spent in a typical run (py-spy, the
hardened column). A fork server imports those modules once, then forks a child per program:
the child enters the node's network namespace, takes the stdio it was handed and runs the
module as `python -m` would (`runpy`, `__main__`, sys.argv), so the program cannot tell.

    python -m cnikit.forkserver FD NETNS_FD MODULE...   the server: enter the kit's network
                                                        namespace, preload MODULEs, serve FD

The kit side is `ForkServer.get(preload)` (one server per process and preload set) and its
`spawn()`, which returns a `Forked`: a Popen-like handle (pid, poll, wait, returncode,
send_signal, kill). A child runs in a session of its own (a signal to its group reaches all
it forked). The server reaps it and reports its exit status and CPU; it exits when the kit
closes its end of the socket, however the kit ends, and leaves its children running, as a
dead kit leaves `python -m` children today (the run's cleanup removes them).

Where the kit cannot use it (another interpreter, CNIKIT_FORKSERVER=0), callers fall back
to a plain exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

ENV_SWITCH = "CNIKIT_FORKSERVER"  # "0": exec every program as before
CLONE_NEWNET = 0x40000000
MAX_MSG = 1 << 16


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


# ---- the kit's side ------------------------------------------------------------------------


class Forked:
    """A program forked by the server, handled as a subprocess.Popen."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]):
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None
        self.cpu: float | None = None  # its user + system seconds, once reaped

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.collect(self)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.server.await_exit(self, timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServerError(OSError):
    pass


class ForkServer:
    """One server process; `spawn()` from any thread."""

    _servers: dict[tuple[int, tuple[str, ...]], ForkServer] = {}
    _servers_lock = threading.Lock()
    on_exit = None  # called with each Forked as it is reaped (the CPU bench counts them)

    @classmethod
    def get(cls, preload: tuple[str, ...]) -> ForkServer:
        key = (os.getpid(), preload)  # a forked kit process starts its own
        with cls._servers_lock:
            server = cls._servers.get(key)
            if server is None or not server.alive:
                server = cls._servers[key] = cls(preload)
            return server

    def __init__(self, preload: tuple[str, ...]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The kit's own network namespace (its main thread's), whatever namespace the thread
        # that asks first has entered: a server born in a run's namespace would be killed
        # with that run's leftovers, and every daemon it forked after would go unreported.
        home = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cnikit.forkserver", str(theirs.fileno()), str(home),
                 *preload],
                pass_fds=[theirs.fileno(), home], stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            os.close(home)
            theirs.close()
        self.sock = ours
        self.alive = True
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: list[dict] = []
        self._exits: dict[int, tuple[int, float]] = {}
        self._reader = threading.Thread(target=self._read, name="forkserver", daemon=True)
        self._reader.start()

    def close(self) -> None:
        """End the server (its children keep running)."""
        # shutdown, not only close: the reader's recv keeps the socket open otherwise.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.proc.wait()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MSG)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self.alive = False
                    self._cond.notify_all()
                    return
                msg = json.loads(data)
                if "exit" in msg:
                    self._exits[msg["exit"]] = (msg["code"], msg["cpu"])
                else:
                    self._replies.append(msg)
                self._cond.notify_all()

    def spawn(self, args: list[str], module: str, env: dict[str, str], netns: str | None = None,
              stdin: int | None = None, stdout: int | None = None,
              stderr: int | None = None) -> Forked:
        """Fork `python -m module args[3:]`-alike; stdio are fds to hand it (None: /dev/null);
        `args` is the command line it stands for (what errors and the bench name)."""
        null = os.open(os.devnull, os.O_RDWR)
        try:
            fds = [null if fd is None else fd for fd in (stdin, stdout, stderr)]
            request = {"module": module, "argv": [module, *args[3:]], "env": env,
                       "netns": netns}
            with self._send_lock:
                try:
                    socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
                except OSError as e:
                    raise ForkServerError(e.errno, f"fork server: {e.strerror}") from None
                reply = self._next_reply()
        finally:
            os.close(null)
        if "error" in reply:
            raise ForkServerError(reply.get("errno", 0), reply["error"])
        return Forked(self, reply["pid"], args)

    def _next_reply(self) -> dict:
        with self._cond:
            while not self._replies:
                if not self.alive:
                    raise ForkServerError(0, "fork server exited")
                self._cond.wait(1.0)
            return self._replies.pop(0)

    def collect(self, child: Forked) -> bool:
        with self._cond:
            got = self._exits.pop(child.pid, None)
            if got is None and not self.alive and _gone(child.pid):
                got = (-signal.SIGKILL, 0.0)  # the server is gone: the status went with it
        if got is None:
            return False
        child.returncode, child.cpu = got
        if ForkServer.on_exit is not None:
            ForkServer.on_exit(child)
        return True

    def await_exit(self, child: Forked, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while child.returncode is None and not self.collect(child):
            with self._cond:
                if child.pid in self._exits:
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                # A dead server cannot notify: look again now and then.
                self._cond.wait(min(left, 0.5) if left is not None else 0.5)
        return True


def _gone(pid: int) -> bool:
    """Whether pid has exited: no longer there, or a zombie nobody reaps (an orphan whose
    new parent does not wait for it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _setns(fd: int, what: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns {what}: {os.strerror(err)}")


# ---- the server ----------------------------------------------------------------------------


_SERVER_FDS: list[int] = []  # the server's own: its socket, selector and wake-up pipe


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the program. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in _SERVER_FDS:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        # As `python -u` (the kit sets PYTHONUNBUFFERED for its programs): a log line is
        # in the file when it is written.
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdio
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("netns"):
            fd = os.open(request["netns"], os.O_RDONLY | os.O_CLOEXEC)
            _setns(fd, request["netns"])
            os.close(fd)
        import runpy

        sys.argv = list(request["argv"])
        # `python -m` has the module as __main__ only: a preloaded copy would be a second one.
        sys.modules.pop(request["module"], None)
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what python -m prints, then its status
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            threading._shutdown()  # what the interpreter does at exit: join non-daemon threads
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(control: int, home: int, preload: list[str]) -> int:
    import importlib

    _setns(home, "of the kit")
    os.close(home)

    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the child imports it again and says why
            print(f"cnikit.forkserver: cannot preload {name}: {e}", file=sys.stderr)
    sock = socket.socket(fileno=control)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd does the work
    signal.set_wakeup_fd(wake_w)
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    _SERVER_FDS.extend([control, wake_r, wake_w, sel.fileno()])
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, 3)
                except InterruptedError:
                    continue
                if not data:
                    return 0  # the kit is gone; its children are the run's to clean up
                _fork(sock, json.loads(data), fds)
            else:
                while os.read(wake_r, 512) == 512:
                    pass
        _reap(sock)


def _fork(sock: socket.socket, request: dict, fds: list[int]) -> None:
    try:
        pid = os.fork()
    except OSError as e:
        reply = {"error": f"fork: {e.strerror}", "errno": e.errno}
    else:
        if pid == 0:
            _child(request, fds)
        reply = {"pid": pid}
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps(reply).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status),
                              "cpu": usage.ru_utime + usage.ru_stime}).encode())


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
