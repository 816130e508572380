"""The control API: JSON over HTTP on its own port (never the IMDS port).

POST /faults {"kind": K, "target": {...}, "duration": s, ...} -> 201 {"id": ..., "fault": {...}}
GET /faults -> {"faults": [...]}    DELETE /faults/{id}, DELETE /faults -> {"removed": [ids]}
  (the shape the EC2 gate's fault API shares: faultcore/wire.py; bodies over 64 KiB are
  refused with 413 before they are read)
GET /events[?since=SEQ][&wait=S] -> {"events": [...], "last_seq": N}  (wait: long poll)
GET /requests[?since=SEQ][&instance_id=ID][&limit=N] -> {"requests": [...], "next": SEQ}
  (every IMDS request answered, oldest first: what each node asked and what it got)
GET /kinds, GET /health
Every error is {"error": "<one line>"} with a 4xx status, and changes nothing. A target
EC2 does not have is refused with {"error": ..., "unknown_target": {FIELD: VALUE}}, judged
against EC2 as of the request (an interface deleted a moment before is unknown), and
with "departed": {"eni_id", "mac", "since"} when EC2 had that interface until `since`.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from fault_imds.engine import Engine, SpecError, kinds
from fault_imds.faults.base import KINDS, UnknownTarget
from faultcore import wire as fault_api

log = logging.getLogger("fault_imds.control")


_error = fault_api.error


@web.middleware
async def one_line_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _error(e.status, e.reason or f"HTTP {e.status}")
    except Exception as e:  # never a traceback on the wire
        log.exception("control API failure")
        return _error(500, f"internal error: {type(e).__name__}: {e}".splitlines()[0])


# Target fields the IMDS checks against EC2: a spec naming one waits for the fence.
EC2_NAMED = ("instance_id", "mac", "eni_id")


def control_app(engine: Engine, health=None, request_log=None, fence=None) -> web.Application:
    """`fence` (the server's, when EC2 is in this process): a spec naming an instance or an
    interface is judged against EC2 as of its arrival, not the last poll, so an interface
    created a moment before is known and one deleted a moment before is not."""
    app = web.Application(middlewares=[one_line_errors])

    async def add_fault(request: web.Request) -> web.Response:
        try:
            spec = await fault_api.read_spec(request)
        except fault_api.Refused as e:
            return _error(e.status, e.reason)
        target = spec.get("target")
        if fence is not None and isinstance(target, dict) and any(k in target for k in EC2_NAMED):
            await fence.wait()
        note = KINDS.respell(spec)
        try:
            fault = engine.add(spec)
        except UnknownTarget as e:
            body = {"error": str(e), "unknown_target": {e.field: e.value}}
            if e.departed is not None:
                body["departed"] = e.departed
            return web.json_response(body, status=400)
        except SpecError as e:
            return _error(400, str(e))
        return fault_api.added(fault.to_json(), note)

    async def list_faults(request: web.Request) -> web.Response:
        return fault_api.listed(engine.list())

    async def remove_fault(request: web.Request) -> web.Response:
        fid = request.match_info["fid"]
        if not engine.remove(fid):
            return _error(404, f"no active fault {fid!r}")
        return fault_api.removed([fid])

    async def clear_faults(request: web.Request) -> web.Response:
        ids = [f["id"] for f in engine.list()]
        engine.clear()
        return fault_api.removed(ids)

    changed = asyncio.Condition()

    def wake() -> None:
        async def notify() -> None:
            async with changed:
                changed.notify_all()

        asyncio.ensure_future(notify())

    engine.events.on_add(wake)

    async def events(request: web.Request) -> web.Response:
        raw = request.query.get("since", "0")
        if not raw.isdigit():
            return _error(400, f"since must be a non-negative integer, got {raw!r}")
        try:
            wait = min(float(request.query.get("wait", "0")), 60.0)
        except ValueError:
            return _error(400, "wait must be a number of seconds")
        since = int(raw)
        if wait > 0 and engine.events.last_seq <= since:
            # Long poll: answer as soon as there is something newer, or after `wait`.
            try:
                async with changed:
                    await asyncio.wait_for(
                        changed.wait_for(lambda: engine.events.last_seq > since), wait
                    )
            except TimeoutError:
                pass
        return web.json_response(
            {"events": engine.events.since(since), "last_seq": engine.events.last_seq}
        )

    async def requests_(request: web.Request) -> web.Response:
        raw, limit = request.query.get("since", "0"), request.query.get("limit")
        if not raw.isdigit():
            return _error(400, f"since must be a non-negative integer, got {raw!r}")
        if limit is not None and (not limit.isdigit() or int(limit) == 0):
            return _error(400, f"limit must be a positive integer, got {limit!r}")
        if request_log is None:
            return web.json_response({"requests": [], "next": int(raw)})
        out, nxt = request_log.since(
            int(raw), request.query.get("instance_id") or None, int(limit) if limit else None
        )
        return web.json_response({"requests": out, "next": nxt})

    async def kinds_(request: web.Request) -> web.Response:
        return web.json_response(kinds())

    async def health_(request: web.Request) -> web.Response:
        return web.json_response(health() if health else {"ok": True})

    app.router.add_post("/faults", add_fault)
    app.router.add_get("/faults", list_faults)
    app.router.add_delete("/faults", clear_faults)
    app.router.add_delete("/faults/{fid}", remove_fault)
    app.router.add_get("/events", events)
    app.router.add_get("/requests", requests_)
    app.router.add_get("/kinds", kinds_)
    app.router.add_get("/health", health_)
    return app
