"""The IMDS request handler: who is asking, the token dance, the request-stage faults, the
answer from the engine's precomputed bodies or IMDS's own error page, and a log entry for
each request. The server that runs it is fault_imds.server."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from fault_imds.engine import Engine, RequestCtx
from fault_imds.faults import Answer, Drop
from fault_imds.fence import Fence
from fault_imds.request_log import RequestLog
from fault_imds.tokens import TokenStore, parse_ttl
from fault_imds.tree import as_latest

TOKEN_PATH = "latest/api/token"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
INSTANCE_HEADER = "X-Cnikit-Instance-Id"
# The same as a query parameter (`?instance=ID`), for a browser or a bare curl on the host.
INSTANCE_QUERY = "instance"
# Set by the kit's own reads (not the node's): the request log marks them, so evidence of
# what a node read is never what the kit itself asked.
OBSERVER_HEADER = "X-Cnikit-Observer"
BODY_LOGGED = 1024
BASE_HEADERS = {"Server": "EC2ws"}

_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


# What AWS's IMDS documentation names the 400 of a token request it refuses (no TTL, or one
# outside 1..21600).
TOKEN_REFUSED = "Missing or Invalid Parameters"


def _error_body(status: int, title: str | None = None) -> bytes:
    # The page real IMDS sends with its errors.
    title = f"{status} - {title or _REASONS.get(status, 'Error')}"
    return (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        f" <head>\n  <title>{title}</title>\n </head>\n"
        f" <body>\n  <h1>{title}</h1>\n </body>\n</html>\n"
    ).encode("latin-1")


def error_response(status: int, headers: dict[str, str] | None = None,
                   title: str | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=_error_body(status, title),
        content_type="text/html",
        headers={**BASE_HEADERS, **(headers or {})},
    )


def _is_loopback(ip: str | None) -> bool:
    return ip is None or ip.startswith("127.") or ip == "::1" or ip.startswith("::ffff:127.")


class Unattributed(Exception):
    """A request from the host that names no instance (or two) while several are served:
    answered 400 in plain text that says how to name one, never IMDS's 404 page, which
    would read as "this entry does not exist"."""


def bad_caller(reason: str, status: int = 400) -> web.Response:
    return web.Response(status=status, text=reason + "\n", content_type="text/plain",
                        headers=BASE_HEADERS)


def wrong_instance(holder: str | None, iid: str | None) -> web.Response:
    """A live token of one instance on another's request. Only the host can make one (a
    node's requests are its own instance's), so it is the host's mistake, said in words; the
    status stays real IMDS's 401, the one clients act on (they ask for a new token)."""
    return bad_caller(f"401 - Unauthorized: this token was issued to {holder or 'no instance'}, and this "
                      f"request is {iid}'s; a token is good only for the instance that asked "
                      f"for it: ask for one with ?{INSTANCE_QUERY}={iid} on the PUT", 401)


class ImdsHandler:
    """Answers IMDS requests from the engine's precomputed bodies, and logs each one."""

    def __init__(
        self, engine: Engine, tokens: TokenStore, default_instance: str | None, require_v2: bool,
        log: RequestLog | None = None, fence: Fence | None = None,
    ):
        self.engine = engine
        self.fence = fence
        self.tokens = tokens
        self.default_instance = default_instance
        self.require_v2 = require_v2
        self.requests = 0
        self.log = log if log is not None else RequestLog()

    def caller(self, request: web.BaseRequest) -> str | None:
        """The requesting instance: the one whose ENI holds the source address (a node's
        namespace: what it sends cannot name another); on loopback (the host) the
        X-Cnikit-Instance-Id header or `?instance=`, else the default, else the only
        instance. Unattributed when the host names none and several are served."""
        # The address the connection came from, as aiohttp kept it when the request came in:
        # the transport is gone once the caller hangs up, and a request a busy IMDS served
        # after the caller's timeout (the fence held it) read as the host's (CI: a node's
        # daemon logged as an unattributed host request).
        ip = request.remote
        if ip is not None and ip.startswith("::ffff:"):
            ip = ip[7:]  # an IPv4 caller on a dual-stack socket
        if _is_loopback(ip):
            return self._host_caller(request)
        return self.engine.owner_of(ip)

    def _host_caller(self, request: web.BaseRequest) -> str | None:
        named = request.headers.get(INSTANCE_HEADER)
        asked = request.query.get(INSTANCE_QUERY) if request.query_string else None
        if named and asked and named != asked:
            raise Unattributed(f"the header {INSTANCE_HEADER} names {named} and "
                               f"?{INSTANCE_QUERY}= names {asked}: name one instance")
        iid = named or asked or self.default_instance
        known = self.engine.true_models
        if iid is None and len(known) == 1:
            iid = next(iter(known))
        elif iid is None and len(known) > 1:
            raise Unattributed(
                f"this IMDS serves {len(known)} instances and a request from the host names "
                f"none: send the header {INSTANCE_HEADER}: ID or add ?{INSTANCE_QUERY}=ID "
                f"(instances: {' '.join(sorted(known))})")
        return iid

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        self.requests += 1
        if self.fence is not None:
            # Before the caller is known: an address EC2 just assigned identifies it too.
            await self.fence.wait()
        try:
            iid = self.caller(request)
        except Unattributed as e:
            resp = bad_caller(str(e))
            self._log(request, None, resp.status, resp.body)
            return resp
        status, body = 0, b""
        try:
            resp = await self._answer(request, iid)
            status, body = resp.status, resp.body if isinstance(resp.body, bytes) else b""
            return resp
        finally:
            self._log(request, iid, status, body)

    def _log(self, request: web.BaseRequest, iid: str | None, status: int, body: bytes) -> None:
        path = as_latest(request.path[1:])  # faults match a dated version's path as latest's
        now = self.engine.clock()
        faults = [
            f.id
            for f in self.engine.faults.values()
            if (f.expires is None or f.expires > now) and f.target.request_matches(iid, path)
        ]
        entry = {
            "time": time.time(),
            "instance_id": iid,
            "method": request.method,
            "path": request.path,
            "status": status,
            "body": body[:BODY_LOGGED].decode("utf-8", errors="replace"),
            "faults": faults,
        }
        if OBSERVER_HEADER in request.headers:
            entry["observer"] = True
        self.log.add(entry)

    async def _answer(self, request: web.BaseRequest, iid: str | None) -> web.StreamResponse:
        path = as_latest(request.path[1:])
        token = request.headers.get(TOKEN_HEADER)
        engine = self.engine
        if engine.request_faults:
            ctx = RequestCtx(iid, path, token, engine.rng, lambda: self.tokens.expire(token),
                             lambda: self._served(iid, path))
            out = await engine.request_stage(ctx)
            if isinstance(out, Drop):
                return self._drop(request)
            if isinstance(out, Answer):
                if out.body is None:
                    return error_response(out.status, out.headers)
                return web.Response(status=out.status, body=out.body, content_type="text/plain",
                                    headers={**BASE_HEADERS, **(out.headers or {})})
        method = request.method
        if path == TOKEN_PATH:
            return self._issue_token(request, iid)
        if method != "GET" and method != "HEAD":
            return error_response(405, {"Allow": "GET, HEAD"})
        if token is not None:
            live, holder = self.tokens.holder(token)
            if not live:
                return error_response(401)
            if holder != iid:
                return wrong_instance(holder, iid)
        elif self.require_v2:
            return error_response(401)
        body = self._served(iid, path)
        if body is None:
            return error_response(404)
        return web.Response(body=body, content_type="text/plain", headers=BASE_HEADERS)

    def _served(self, iid: str | None, path: str) -> bytes | None:
        tree = self.engine.served.get(iid) if iid is not None else None
        return tree.get(path) if tree is not None else None

    def _issue_token(self, request: web.BaseRequest, iid: str | None) -> web.Response:
        if request.method != "PUT":
            return error_response(405, {"Allow": "PUT"})
        # Real IMDS refuses token requests that went through a proxy.
        if "X-Forwarded-For" in request.headers:
            return error_response(403)
        ttl = parse_ttl(request.headers.get(TTL_HEADER))
        if ttl is None:
            return error_response(400, title=TOKEN_REFUSED)
        token = self.tokens.issue(ttl, iid)
        return web.Response(
            text=token,
            content_type="text/plain",
            headers={**BASE_HEADERS, TTL_HEADER: str(ttl)},
        )

    @staticmethod
    def _drop(request: web.BaseRequest) -> web.StreamResponse:
        # Close the connection without a byte of answer. aiohttp still wants a response
        # object; with the transport gone it writes nothing.
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError
