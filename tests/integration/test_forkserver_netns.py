"""The fork server lives in the kit's own network namespace, whichever namespace the thread
that starts it has entered: one born in a run's namespace would die with that run's
leftovers, and the daemons it forked after would go unreported."""

from __future__ import annotations

import ctypes
import os
import threading

import pytest

from cnikit import forkserver

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


def test_a_server_started_from_a_thread_in_another_namespace_lives_in_the_kits():
    servers: list[forkserver.ForkServer] = []
    seen: list[int] = []

    def elsewhere():
        # A namespace of this thread alone, gone with it: nothing is left on the host.
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(forkserver.CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
        seen.append(os.stat("/proc/thread-self/ns/net").st_ino)
        servers.append(forkserver.ForkServer(("json",)))

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join(30)
    [server] = servers
    try:
        kit = os.stat("/proc/self/ns/net").st_ino
        assert seen[0] != kit
        # Its preloads done means it has entered the namespace it was handed.
        r, w = os.pipe()
        child = server.spawn([forkserver.sys.executable, "-m", "json.tool"], "json.tool", {},
                             stdin=None, stdout=w)
        os.close(w)
        os.close(r)
        child.wait(20)
        assert os.stat(f"/proc/{server.proc.pid}/ns/net").st_ino == kit
    finally:
        server.close()
