"""The nemesis's acts on the nodes' daemons: kills (at once, in a write, after an EC2
call), restarts of one node or of every node at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from cnikit.cluster.nemesis_log import END, INFO, START


class NodeDaemons(Protocol):
    """What the nemesis needs of whoever runs the nodes' daemons (CniCluster). None of these
    records anything: the nemesis does, around them."""

    def instance_id(self, node: int) -> str: ...

    def node_of(self, instance_id: str) -> int | None:
        """The node whose instance it is; None for an instance of no node."""

    def signal_daemon(self, node: int, sig: int) -> None: ...

    def stop_and_start_daemon(self, node: int, wait: float) -> None:
        """Stop the daemon if it runs, start it, and wait up to `wait` s until it is ready."""

    def daemon_state_dir(self, node: int) -> Path: ...

    def daemon_pids(self, node: int) -> set[int]: ...


class DaemonActs:
    """A mixin of Nemesis (its `daemons`, `on_down`/`on_up` and its log): every kill and
    restart is one operation, and a node is down from its kill to its restart's end."""

    def node_target(self, node: int) -> dict:
        """The target of an act on the node's daemon; ValueError without daemons."""
        if self.daemons is None:
            raise ValueError("this nemesis has no daemons")
        return {"node": node, "instance_id": self.daemons.instance_id(node)}

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL, **params) -> None:
        """Send sig to the node's daemon: it is down until restart_daemon(node)."""
        target = self.node_target(node)
        self.on_down(node)
        self.down_kill(node, f"kill-{node}", "daemon-kill", target,
                       lambda: self.daemons.signal_daemon(node, sig), signal=int(sig), **params)

    def down_kill(self, key, prefix: str, op: str, target: dict, act, **params) -> None:
        """Do the kill `act` and record it as `op`: what `key` names (a node, a component) is
        down from here until down_restart(key)."""
        self.attempt(op, target, act, **params)
        with self._down_lock:
            if key in self._down:  # killed again while down: one down time
                return
            fid = self.new_id(prefix)
            self._down[key] = (op, fid)
        self.record(START, op, target, id=fid, **params)

    def kill_in_write(self, node: int):
        """Arm a trap on the node's daemon state directory: the next time the daemon opens a
        file there for writing (a checkpoint write), it is SIGKILLed right after the open,
        before it wrote a byte (cnikit.cluster.write_trap). Returns the armed WriteTrap
        (`wait(timeout)` -> what it fired on); the kill is a daemon-kill with `in_write`."""
        from cnikit.cluster.write_trap import WriteTrap

        self.node_target(node)

        def fire(pid: int, path: str) -> None:
            self.kill_daemon(node, signal.SIGKILL, in_write=os.path.basename(path))

        # The trap kills first and records after (kill_daemon): on_down goes before the kill.
        return WriteTrap(self.daemons.daemon_state_dir(node),
                         lambda: self.daemons.daemon_pids(node),
                         fire, before_kill=lambda: self.on_down(node))

    def crash_at(self, node: int, action: str):
        """Arm a crash point (cnikit.cluster.crash_point): when the gate serves `action` (one
        of CRASH_ACTIONS) for the node, successfully, the process that made the call (the
        node's daemon, or a cluster component) is SIGKILLed after the call took effect and
        before its answer leaves. Returns the armed CrashPoint (`wait(timeout)` -> what it
        fired on); the kill is a daemon-kill or component-kill with `after_call`.
        ValueError (one line) for another action."""
        from cnikit.cluster.crash_point import CrashPoint

        point = CrashPoint(self, node, action)
        point.id = self.new_id(f"crash-{node}")
        self.crash_points[point.id] = point
        return point

    def restart_daemon(self, node: int, wait: float = 60.0) -> None:
        """Restart the node's daemon and wait until it is ready: the end of its kill, or for
        a running daemon a daemon-restart from stop to ready. A restart that fails (raises)
        leaves the daemon down until one succeeds."""
        target = self.node_target(node)
        self.on_down(node)
        self.down_restart(node, f"restart-{node}", "daemon-restart", target,
                          lambda: self.daemons.stop_and_start_daemon(node, wait),
                          up=lambda: self.on_up(node))

    def down_restart(self, key, prefix: str, op: str, target: dict, act, up=None) -> None:
        """Do the restart `act` (recorded as `op`): the end of `key`'s kill, or for one that
        runs an `op` of its own from stop to ready. One that fails (raises) leaves it down
        until one succeeds. `up()` runs once it is up, before the end is recorded."""
        with self._down_lock:
            down = self._down.get(key)
            if down is None:
                down = self._down[key] = (op, self.new_id(prefix))
                fresh = True
            else:
                fresh = False
        if fresh:
            self.record(START, down[0], target, id=down[1])
        self.attempt(op, target, act)
        with self._down_lock:
            self._down.pop(key, None)
        if up is not None:
            up()
        self.record(END, down[0], target, id=down[1], by="restart")

    def restart_all(self, nodes: Iterable[int], wait: float = 60.0) -> dict[int, Exception]:
        """A synchronized restart (upstream 873/617: every node restarted at once): every
        node's daemon SIGKILLed first, then all started together, each waited for. One
        daemon-restart-all entry, framed by each node's daemon-kill and its end. Returns
        node -> the error of a restart that failed (that daemon stays down)."""
        nodes = list(nodes)
        for node in nodes:
            self.kill_daemon(node, signal.SIGKILL, all_at_once=True)
        self.record(INFO, "daemon-restart-all", {"nodes": nodes})
        failed: dict[int, Exception] = {}

        def one(node: int) -> None:
            try:
                self.restart_daemon(node, wait)
            except Exception as e:  # noqa: BLE001 - reported to the caller, per node
                failed[node] = e

        threads = [threading.Thread(target=one, args=(n,), name=f"restart-{n}") for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return failed
