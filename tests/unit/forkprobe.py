"""A program for test_forkserver.py: run as `python -m tests.unit.forkprobe CMD`, it says how
it was run."""

import json
import os
import signal
import sys
import threading

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "describe":
        print(json.dumps({"argv": sys.argv[1:], "name": __name__, "probe": os.environ.get("PROBE"),
                          "home": os.environ.get("HOME"), "session_leader": os.getsid(0) == os.getpid(),
                          "stdin": sys.stdin.read()}))
    elif cmd == "exit":
        sys.exit(int(sys.argv[2]))
    elif cmd == "message":
        sys.exit("probe: bad input")
    elif cmd == "raise":
        raise RuntimeError("probe failed")
    elif cmd == "thread":  # the interpreter joins a non-daemon thread before it exits
        go = threading.Event()
        t = threading.Thread(target=lambda: (go.wait(), print("thread done", flush=True)))
        t.start()
        go.set()
    elif cmd == "pause":
        print("paused", flush=True)
        signal.pause()
