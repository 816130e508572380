"""The gate's control API, on the EC2 port under a path EC2 never uses (`/_cnikit/`).

    GET    /_cnikit/owners[?since=V&wait=S]   OwnershipSnapshot as JSON; with `since`, waits
                                              up to S seconds (default 30, at most 300)
                                              until the version exceeds V; "world"
                                              counts the writes that may change
                                              instances, subnets or VPCs
    GET    /_cnikit/audit                     the audit log
    GET    /_cnikit/faults                    {"faults": [...]}: live EC2 faults
    POST   /_cnikit/faults                    {"kind": K, "target": {"action": A,
                                              "region": R}, "duration": s, "probability": p,
                                              ...attributes} -> 201 {"id", "fault"}
    DELETE /_cnikit/faults[/ID]               remove one, or all -> {"removed": [ids]}
    GET    /_cnikit/kinds                     {kind: {"description", "stage", "order",
                                              "attributes", "params", "chaos"}}: the EC2
                                              fault kinds, as the fault IMDS's GET /kinds
    GET    /_cnikit/nemesis                   {"actions": {name: {"description", "why",
                                              "params", "chaos"}}, "crash_points": [...]}
    POST   /_cnikit/nemesis                   {"action": NAME, ...attributes} -> 200
                                              {"action", "result"}: a nemesis action
                                              (cnikit.cluster.actions: kill, restart,
                                              restart-all, crash-at, sweep-enis, unassign,
                                              detach-eni), recorded in the run's history

The nemesis routes answer only where the gate serves a run's nodes (`cnikit up`), else 404.

The faults endpoints take the fault IMDS's body and answer in its shape (faultcore/wire.py),
so one client drives both. Bad input answers 4xx with {"error": "<one line>"}. The owners JSON is encoded
once per mirror version, so polling it many times a second costs little.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from cnikit.cloud.faults import KINDS
from cnikit.errors import CnikitError
from faultcore import wire as fault_api
from faultcore.errors import SpecError

MAX_WAIT_S = 300.0


def _bad(reason: str, status: int = 400) -> web.Response:
    return fault_api.error(status, reason)


class ControlApi:
    def __init__(self, gate, prefix: str):
        self.gate = gate
        self.prefix = prefix
        self.nemesis = None  # the run's nemesis this gate serves (Served), if any
        self._owners_json: tuple[tuple[int, int], bytes] = ((-1, -1), b"")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path[len(self.prefix):].strip("/")
        method = request.method
        faults = self.gate.faults
        try:
            if path == "owners" and method == "GET":
                return await self._owners(request)
            if path == "audit" and method == "GET":
                return web.json_response(self.gate.audit.to_json())
            if path == "faults" and method == "GET":
                return fault_api.listed(faults.list())
            if path == "kinds" and method == "GET":
                return web.json_response(KINDS.describe())
            if path == "faults" and method == "DELETE":
                return fault_api.removed(faults.clear())
            if path == "faults" and method == "POST":
                spec = await fault_api.read_spec(request)
                note = KINDS.respell(spec)
                fid = faults.add_spec(spec)
                live = next((f for f in faults.list() if f["id"] == fid), None)
                # A fault whose duration ran out already is still reported as added.
                return fault_api.added(live or {"id": fid, **spec}, note)
            if path == "nemesis" and method in ("GET", "POST"):
                return await self._nemesis(request)
            if path.startswith("faults/") and method == "DELETE":
                fid = path.split("/", 1)[1]
                if not faults.remove(fid):
                    return _bad(f"no active fault {fid!r}", 404)
                return fault_api.removed([fid])
        except fault_api.Refused as e:
            return _bad(e.reason, e.status)
        except CnikitError as e:
            return _bad(str(e))
        return _bad(f"no such endpoint: {method} {request.path}", 404)

    def serve_nemesis(self, served) -> None:
        """Answer $GATE/nemesis with a run's nemesis (cnikit.cluster.actions.Served: its
        describe(), check(spec), act(spec)); None: stop."""
        self.nemesis = served

    async def _nemesis(self, request: web.Request) -> web.StreamResponse:
        served = self.nemesis
        if served is None:
            return _bad("no nemesis here: only a gate serving a run's nodes (cnikit up) "
                        "takes nemesis actions", 404)
        if request.method == "GET":
            return web.json_response(served.describe())
        spec = await fault_api.read_spec(request)
        try:
            served.check(spec)
        except SpecError as e:  # a bad spec: nothing done
            return _bad(str(e))
        loop = asyncio.get_running_loop()
        try:
            # Off the loop: a restart waits for a daemon whose start calls this gate.
            result = await loop.run_in_executor(None, served.act, spec)
        except Exception as e:  # noqa: BLE001 - the act failed (recorded by the nemesis)
            return _bad(f"{spec['action']} failed: {type(e).__name__}: {e}", 409)
        return web.json_response({"action": spec["action"], "result": result})

    async def _owners(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        try:
            since = int(q["since"]) if "since" in q else None
            wait = min(float(q.get("wait", "30")), MAX_WAIT_S)
        except ValueError:
            return _bad("since must be an integer and wait a number of seconds")
        if since is not None:
            try:
                await asyncio.wait_for(self.gate.wait_version(since), max(wait, 0.0))
            except TimeoutError:
                pass
        return web.Response(body=self._owners_bytes(), content_type="application/json")

    def _owners_bytes(self) -> bytes:
        key, body = self._owners_json
        world = self.gate.world_writes
        if key != (self.gate.mirror.version, world):
            snap = self.gate.owners()
            body = json.dumps({**snap.to_json(), "world": world}).encode()
            self._owners_json = ((snap.version, world), body)
        return body
