#!/usr/bin/env python3
"""agent: the node side of the operator-pool fixture. It hands the addresses the operator put
in its node's OperatorNode (spec.pool) to pods, one each, over the unix socket the
prefix-ipam CNI plugin speaks (one JSON request line, one JSON answer line), and never calls
EC2.

    agent.py --state-dir DIR --node NAME --subnet CIDR

Every SYNC it reads its OperatorNode, answers the operator's release marks ("ready" for an
address no pod holds or is cooling down, "do-not-release" otherwise, decided under the same
lock as an ADD's pick, and a marked address is never handed out) and publishes the
addresses in use in status.used. Its allocations are a checkpoint in the state dir (temp
file, fsync, rename), read back after a restart.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import socketserver
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from central.store import Store, StoreError  # noqa: E402

log = logging.getLogger("agent")
SCALE = float(os.environ.get("CNIKIT_TIME_SCALE") or 1.0) or 1.0
COOLDOWN = float(os.environ.get("IP_COOLDOWN_PERIOD") or 30.0) * SCALE
SYNC = 0.1
WAIT_FOR_POOL = 20.0  # an ADD waits this long for the operator to grow the pool


class Refused(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


class Agent:
    def __init__(self, state_dir: Path, node: str, prefixlen: int):
        self.checkpoint, self.node, self.prefixlen = state_dir / "checkpoint.json", node, prefixlen
        self.store = Store()
        self.allocs: dict[str, str] = {}  # "container-id/ifname" -> ip
        self.cooling: dict[str, float] = {}  # ip -> when it was freed (wall clock: restarts)
        self.pool: set[str] = set()
        self.marked: set[str] = set()  # in the release map: never handed out
        self.gateway = ""
        self.published: list[str] | None = None
        self.cond = threading.Condition()

    def load(self) -> None:
        try:
            doc = json.loads(self.checkpoint.read_text())
        except FileNotFoundError:
            return
        # An unreadable checkpoint stops the agent: an empty one would hand out pods' addresses.
        self.allocs, self.cooling = dict(doc["allocs"]), dict(doc["cooling"])

    def save(self) -> None:
        tmp = self.checkpoint.with_name(self.checkpoint.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"allocs": self.allocs, "cooling": self.cooling}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.checkpoint)

    def in_use(self) -> set[str]:
        now = time.time()
        self.cooling = {ip: t for ip, t in self.cooling.items() if now - t < COOLDOWN}
        return set(self.allocs.values()) | set(self.cooling)

    # -- the operator's resource

    def sync(self) -> None:
        obj = self.store.resource(self.node)
        if obj is None:
            return  # the operator has not reached this node yet
        release = (obj.get("status") or {}).get("release") or {}
        with self.cond:
            busy = self.in_use()
            answers = {ip: "do-not-release" if ip in busy else "ready"
                       for ip, state in release.items() if state == "marked"}
            self.pool, self.marked = set(obj["spec"].get("pool") or []), set(release)
            self.gateway = obj["spec"].get("primaryIP", "")
            used = sorted(busy)
            self.cond.notify_all()
        status: dict = {}
        if answers:
            status["release"] = answers
            log.info("release answers %s", answers)
        if used != self.published:
            status["used"] = used
        if status:
            self.store.patch(self.node, {"status": status})
            self.published = used

    def loop(self) -> None:
        while True:
            try:
                self.sync()
            except StoreError as e:
                log.warning("sync: %s", e)
            time.sleep(SYNC)

    # -- what the plugin asks

    def _free(self) -> list[str]:
        free = self.pool - self.in_use() - self.marked
        return sorted(free, key=lambda ip: int(ipaddress.ip_address(ip)))

    def add(self, key: str) -> dict:
        with self.cond:
            if key in self.allocs:  # as host-local: ptp's rollback DEL would free a live pod's
                raise Refused(999, f"{self.allocs[key]} has been allocated to {key}, "
                                   "duplicate allocation is not allowed")
            if not self.cond.wait_for(self._free, WAIT_FOR_POOL):
                raise Refused(11, "no free address in the node's pool")
            ip = self._free()[0]
            self.allocs[key] = ip
            try:
                self.save()  # before the answer: a restart must know this pod
            except OSError as e:
                del self.allocs[key]
                raise Refused(5, f"checkpoint: {e}") from None
            log.info("ADD %s -> %s", key, ip)
            return {"ip": ip, "prefixlen": self.prefixlen, "gateway": self.gateway}

    def delete(self, key: str) -> dict:
        with self.cond:
            ip = self.allocs.pop(key, None)
            if ip is None:
                raise Refused(3, f"{key} not found")
            self.cooling[ip] = time.time()
            try:
                self.save()
            except OSError as e:
                self.allocs[key] = ip
                raise Refused(5, f"checkpoint: {e}") from None
            log.info("DEL %s (%s)", key, ip)
            return {"ip": ip}

    def check(self, key: str) -> dict:
        with self.cond:
            ip = self.allocs.get(key)
        if ip is None:
            raise Refused(3, f"{key} not found")
        return {"ip": ip}


class Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self) -> None:
        line = self.rfile.readline(65536)
        if not line.strip():
            return  # a readiness probe: connect, then close
        agent: Agent = self.server.agent  # type: ignore[attr-defined]
        try:
            req = json.loads(line)
            op, key = req["op"], str(req["key"])
            answer = {"add": agent.add, "del": agent.delete, "check": agent.check}[op](key)
            answer["ok"] = True
        except Refused as e:
            answer = {"ok": False, "code": e.code, "msg": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"ok": False, "code": 6, "msg": f"bad request: {e}"}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state-dir", required=True, type=Path)
    ap.add_argument("--node", required=True)
    ap.add_argument("--subnet", required=True, type=ipaddress.ip_network)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s agent %(levelname)s %(message)s")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(args.state_dir, args.node, args.subnet.prefixlen)
    agent.load()
    log.info("node %s: %d pods from the checkpoint, cooldown %.2fs", args.node,
             len(agent.allocs), COOLDOWN)
    threading.Thread(target=agent.loop, name="sync", daemon=True).start()
    sock = args.state_dir / "agent.sock"
    sock.unlink(missing_ok=True)  # left by the previous life (SIGKILL)
    server = Server(str(sock), Handler)
    server.agent = agent  # type: ignore[attr-defined]
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
