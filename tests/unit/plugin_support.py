"""What the plugin's unit tests share: each build of cnikit-cni installed as a node gets it,
run as a container runtime runs it (environment and stdin, one exec), and a real unix socket
server standing in for the daemon."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading

import pytest

from cnikit.plugin.launcher import write_launcher

BUILDS = ("compiled", "python")

# SPEC.md's error object: a code, a one-line msg, optional details.
ERROR_SCHEMA = {
    "type": "object", "required": ["cniVersion", "code", "msg"],
    "properties": {"cniVersion": {"type": "string", "minLength": 1},
                   "code": {"type": "integer", "minimum": 1},
                   "msg": {"type": "string", "minLength": 1, "pattern": r"^[^\n]*$"},
                   "details": {"type": "string"}},
}


def needs_go():
    if shutil.which("go") is None:
        pytest.skip("Go is not installed (Debian: apt-get install golang-go)")


def install(tmp_path_factory, build):
    """cnikit-cni of `build` in a fresh bin directory (the compiled one with its Python beside)."""
    if build == "compiled":
        needs_go()
    return str(write_launcher(tmp_path_factory.mktemp("bin"), build=build))


class FakeDaemon:
    """A real unix socket server answering like the daemon, recording the requests.

    `answer(request)` gives the reply: a JSON value to send as one line, bytes to send as they
    are, or None to close the connection without a word."""

    def __init__(self, path, answer):
        self.path, self.answer, self.requests = str(path), answer, []
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(self.path)
        self.srv.listen(8)
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn:
                req = json.loads(conn.makefile().readline())
                self.requests.append(req)
                resp = self.answer(req)
                if isinstance(resp, bytes):
                    conn.sendall(resp)
                elif resp is not None:
                    conn.sendall(json.dumps(resp).encode() + b"\n")

    def close(self):
        self.srv.close()


def run(plugin, command, stdin=b"", **env):
    """Exit code and stdout (parsed) of one run; `command` None leaves CNI_COMMAND unset, an
    env value None leaves that variable unset. A plugin never writes to stderr."""
    base = {"PATH": os.environ["PATH"]}
    if command is not None:
        base["CNI_COMMAND"] = command
    base.update({k: v for k, v in env.items() if v is not None})
    p = subprocess.run([plugin], input=stdin, env=base, capture_output=True, timeout=30)
    assert p.stderr == b""
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None)
