"""The one wire shape of the kit's two fault APIs: the fault IMDS's control port and the EC2
gate's `/_cnikit/` (both servers answer through these helpers, so they cannot drift apart,
and `fault_imds.client.FaultClient` drives either).

    POST   /faults      {"kind": K, ...}   201 {"id": ID, "fault": {"id": ID, "kind": K, ...}}
                                           (+ "deprecated": a note, when K was an old spelling)
    GET    /faults                         200 {"faults": [fault, ...]}
    DELETE /faults/ID                      200 {"removed": [ID]}        (404 when not active)
    DELETE /faults                         200 {"removed": [ID, ...]}
    any refusal                            4xx {"error": "<one line>"}, nothing changed

A request body is one JSON object of at most MAX_BODY bytes: a larger Content-Length is
refused at once (413) without waiting for the body, and a body that stops arriving is
refused after BODY_TIMEOUT_S (408).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from aiohttp import web

MAX_BODY = 64 * 1024
BODY_TIMEOUT_S = 5.0


class Refused(Exception):
    """A request the API refuses: its status and one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def error(status: int, reason: str) -> web.Response:
    lines = str(reason).splitlines()
    return web.json_response({"error": lines[0] if lines else f"HTTP {status}"}, status=status)


def added(fault: dict[str, Any], deprecated: str | None = None) -> web.Response:
    """201 with the fault; `deprecated`: the note for a kind sent in an old spelling
    (faultcore.fault.Kinds.respell), taken all the same."""
    body: dict[str, Any] = {"id": fault["id"], "fault": fault}
    if deprecated:
        body["deprecated"] = deprecated
    return web.json_response(body, status=201)


def listed(faults: Iterable[dict[str, Any]]) -> web.Response:
    return web.json_response({"faults": list(faults)})


def removed(ids: Iterable[str]) -> web.Response:
    return web.json_response({"removed": list(ids)})


async def read_spec(request: web.BaseRequest) -> dict[str, Any]:
    """The request's JSON object, or Refused (413 before reading when too long)."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY:
        raise Refused(413, f"Content-Length {declared} is over the limit of {MAX_BODY} bytes")
    raw = bytearray()

    async def drain() -> None:
        while len(raw) <= MAX_BODY:
            chunk = await request.content.read(65536)
            if not chunk:
                return
            raw.extend(chunk)

    try:
        await asyncio.wait_for(drain(), BODY_TIMEOUT_S)
    except TimeoutError:
        raise Refused(408, f"the body did not arrive within {BODY_TIMEOUT_S:g} s") from None
    if len(raw) > MAX_BODY:
        raise Refused(413, f"body is over the limit of {MAX_BODY} bytes")
    try:
        spec = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(400, f"body is not JSON: {e}") from None
    if not isinstance(spec, dict):
        raise Refused(400, 'body must be a JSON object: {"kind": ..., ...}')
    return spec
