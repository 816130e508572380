"""The IMDS HTTP server and its lifecycle (a background thread with its own event loop).

    imds = ImdsServer(ec2_endpoint=cloud.endpoint).start()
    imds.url, imds.control_url; imds.add_listener(sock); imds.stop()

The IMDS side is aiohttp's low-level server (no router: the hot path is one dict lookup
into bodies precomputed by the engine). The control API is a separate aiohttp app on its
own port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from fault_imds.control import control_app
from fault_imds.ec2_view import Ec2View
from fault_imds.engine import Engine, RequestCtx
from fault_imds.faults import Answer, Drop
from fault_imds.tokens import TokenStore, parse_ttl
from fault_imds.tree import as_latest

# How long add_listener waits for the server's loop (see there).
ADD_LISTENER_S = 60.0
log = logging.getLogger("fault_imds")

TOKEN_PATH = "latest/api/token"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
INSTANCE_HEADER = "X-Cnikit-Instance-Id"
# The same as a query parameter (`?instance=ID`), for a browser or a bare curl on the host.
INSTANCE_QUERY = "instance"
# Set by the kit's own reads (not the node's): the request log marks them, so evidence of
# what a node read is never what the kit itself asked.
OBSERVER_HEADER = "X-Cnikit-Observer"
REQUEST_LOG_MAX = 50_000
BODY_LOGGED = 1024
TICK_S = 0.02
# The longest an answer waits for the view to catch up with EC2: well under the IMDS
# clients' own timeouts (the reference daemon's is 2 s), so a late answer still arrives.
FENCE_S = 1.0
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


def _error_body(status: int) -> bytes:
    # The page real IMDS sends with its errors.
    title = f"{status} - {_REASONS.get(status, 'Error')}"
    return (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
        '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
        f" <head>\n  <title>{title}</title>\n </head>\n"
        f" <body>\n  <h1>{title}</h1>\n </body>\n</html>\n"
    ).encode("latin-1")


def error_response(status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=_error_body(status),
        content_type="text/html",
        headers={**BASE_HEADERS, **(headers or {})},
    )


def _is_loopback(ip: str | None) -> bool:
    return ip is None or ip.startswith("127.") or ip == "::1" or ip.startswith("::ffff:127.")


class Unattributed(Exception):
    """A request from the host that names no instance (or two) while several are served:
    answered 400 in plain text that says how to name one, never IMDS's 404 page, which
    would read as "this entry does not exist"."""


def bad_caller(reason: str) -> web.Response:
    return web.Response(status=400, text=reason + "\n", content_type="text/plain",
                        headers=BASE_HEADERS)


class RequestLog:
    """Every answered request, in order, in a bounded ring: what each node asked and got.

    Entries: {"seq", "time" (epoch), "instance_id", "method", "path", "status" (0: the
    connection was dropped), "body" (served text, cut at ~1 KB), "faults" (ids of the active
    faults whose target matches the request)}, plus "observer": true for the kit's own reads.
    """

    def __init__(self, maxlen: int = REQUEST_LOG_MAX):
        self._entries: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self.last_seq = 0

    def add(self, entry: dict[str, Any]) -> None:
        self.last_seq += 1
        entry["seq"] = self.last_seq
        self._entries.append(entry)

    def since(
        self, seq: int = 0, instance_id: str | None = None, limit: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Entries after `seq` (for one instance if given) and the seq to ask from next."""
        out: list[dict[str, Any]] = []
        # Entries are in seq order: skip the old ones from the right end without a scan.
        start = max(0, len(self._entries) - (self.last_seq - seq))
        for i in range(start, len(self._entries)):
            e = self._entries[i]
            if instance_id is not None and e["instance_id"] != instance_id:
                continue
            out.append(e)
            if limit is not None and len(out) >= limit:
                return out, e["seq"]
        return out, self.last_seq


class Fence:
    """Holds an answer until the view has read EC2 as of the request's arrival.

    Only with an EC2 in this process (faultcore.freshness): `counter` is its change count,
    `polled(count)` runs on the loop after each poll. Without a fault the IMDS then never
    answers behind EC2, however busy the machine; staleness is the fault kinds' alone.
    While EC2 cannot be read, or after FENCE_S, the last view is served (counted in `late`).
    """

    def __init__(self, counter: Callable[[], int], view: Ec2View):
        self.counter = counter
        self.view = view
        self.reached = -1
        self.late = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def polled(self, count: int) -> None:
        self.reached = max(self.reached, count)
        keep = []
        for need, fut in self._waiters:
            if fut.done():
                continue
            if need <= self.reached:
                fut.set_result(None)
            else:
                keep.append((need, fut))
        self._waiters = keep

    async def wait(self) -> None:
        need = self.counter()
        if need <= self.reached:
            return
        if self.view.last_error is not None:
            self.late += 1
            return
        self._waiters = [(n, f) for n, f in self._waiters if not f.done()]
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((need, fut))
        self.view.poke()
        try:
            await asyncio.wait_for(fut, FENCE_S)
        except TimeoutError:
            self.late += 1


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
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport else None
        ip = peer[0] if peer else None
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
            if not self.tokens.valid(token, iid):
                return error_response(401)
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
            return error_response(400)
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


class ImdsServer:
    """An IMDS following EC2 at `ec2_endpoint`, with faults set over the control API.

    `seed` makes probabilistic faults and latency jitter reproducible. `poll_interval` is
    how often EC2 is read; `history_s` how far back `lag` can reach.
    """

    def __init__(
        self,
        ec2_endpoint: str,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        control: tuple[str, int] = ("127.0.0.1", 0),
        instance_id: str | None = None,
        require_v2: bool = False,
        seed: int | None = None,
        region: str = "us-east-1",
        poll_interval: float = 0.05,
        history_s: float = 900.0,
        ec2_wait_s: float = 30.0,
    ):
        self.ec2_endpoint = ec2_endpoint
        self.listen = listen
        self.control = control
        self.instance_id = instance_id
        self.require_v2 = require_v2
        self.seed = seed
        self.region = region
        self.poll_interval = poll_interval
        self.history_s = history_s
        self.ec2_wait_s = ec2_wait_s
        self.url = ""
        self.control_url = ""
        self.engine: Engine | None = None
        self.ec2: Ec2View | None = None
        self.fence: Fence | None = None
        self.handler: ImdsHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self._imds_runner: web.ServerRunner | None = None
        self._control_runner: web.AppRunner | None = None
        self._extra_sites: list[web.SockSite] = []
        self._started_at = 0.0
        self.request_log = RequestLog()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ImdsServer:
        self._thread = threading.Thread(target=self._thread_main, name="fault-imds", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join(timeout=10)
            raise self._startup_error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout=20)
        if self.ec2 is not None:
            self.ec2.stop()

    def __enter__(self) -> ImdsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def add_listener(self, sock: socket.socket) -> None:
        """Also serve IMDS on a pre-bound listening socket (e.g. 169.254.169.254:80 made
        inside the VPC namespace). The caller keeps no duty: stop() closes it."""
        if self._loop is None:
            raise RuntimeError("start() the server before add_listener()")
        fut = asyncio.run_coroutine_threadsafe(self._add_site(sock), self._loop)
        try:
            # A busy machine can keep the server's loop from it for seconds: the bound is
            # only there to turn a dead server thread into an error, never a verdict.
            fut.result(timeout=ADD_LISTENER_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise RuntimeError(f"the fault IMDS server did not take a listener within "
                               f"{ADD_LISTENER_S:g}s (its thread stuck or gone)") from None

    # -- in the server thread ----------------------------------------------------------------

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as e:  # reported to start() when it happens during startup
            if not self._ready.is_set():
                self._startup_error = e
            else:
                log.exception("fault-imds server thread failed")
        finally:
            self._ready.set()
            loop.close()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self.engine = Engine(seed=self.seed)
        self.ec2 = Ec2View(
            self.ec2_endpoint,
            region=self.region,
            interval=self.poll_interval,
            history_s=self.history_s,
            on_change=lambda state: loop.call_soon_threadsafe(self.engine.set_state, state),
            # After on_change's, on this loop: a fence released has the state it waited for.
            on_polled=lambda count: loop.call_soon_threadsafe(self._polled, count),
        )
        counter = self.ec2.counter
        self.fence = Fence(counter, self.ec2) if counter is not None else None
        self.engine.history = self.ec2
        self.ec2.start()
        try:
            first = await loop.run_in_executor(None, self.ec2.wait_first, self.ec2_wait_s)
            if not first:
                raise ConnectionError(
                    f"EC2 at {self.ec2_endpoint} did not answer within {self.ec2_wait_s:g}s: "
                    f"{self.ec2.last_error}"
                )
            # The first state was scheduled onto this loop; let it land before serving.
            while self.engine.state is None:
                await asyncio.sleep(0.005)
            self.tokens = TokenStore()
            self.handler = ImdsHandler(
                self.engine, self.tokens, self.instance_id, self.require_v2, self.request_log,
                self.fence,
            )
            server = web.Server(self.handler, access_log=None)
            self._imds_runner = web.ServerRunner(server, access_log=None, shutdown_timeout=1)
            await self._imds_runner.setup()
            site = web.TCPSite(self._imds_runner, self.listen[0], self.listen[1], backlog=1024)
            await site.start()
            self.url = _url(self._imds_runner.addresses[0])
            self._control_runner = web.AppRunner(
                control_app(self.engine, self._health, self.request_log, self.fence),
                access_log=None,
                shutdown_timeout=1,
                # A refused body (413) is not drained for seconds: the connection just closes.
                lingering_time=0,
            )
            await self._control_runner.setup()
            csite = web.TCPSite(self._control_runner, self.control[0], self.control[1])
            await csite.start()
            self.control_url = _url(self._control_runner.addresses[0])
            self._started_at = time.monotonic()
        except BaseException:
            self.ec2.stop()
            await self._cleanup()
            raise
        self._ready.set()
        ticker = asyncio.create_task(self._tick())
        try:
            await self._stopping.wait()
        finally:
            ticker.cancel()
            # The poller hands states to this loop: stop it before the loop goes away.
            await loop.run_in_executor(None, self.ec2.stop)
            await self._cleanup()

    def _polled(self, count: int) -> None:
        if self.fence is not None:
            self.fence.polled(count)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        added = asyncio.Event()
        self.engine.on_fault_added = lambda: loop.call_soon_threadsafe(added.set)
        while True:
            if not self.engine.faults:
                # A tick acts on faults only (expiry, a lag moving on): with none, wait for
                # one rather than wake 50 times a second for the whole run.
                added.clear()
                await added.wait()
            await asyncio.sleep(TICK_S)
            try:
                self.engine.tick()
            except Exception:
                log.exception("fault engine tick failed")

    async def _add_site(self, sock: socket.socket) -> None:
        site = web.SockSite(self._imds_runner, sock)
        await site.start()
        self._extra_sites.append(site)

    async def _cleanup(self) -> None:
        for runner in (self._imds_runner, self._control_runner):
            if runner is not None:
                await runner.cleanup()

    def _health(self) -> dict[str, Any]:
        ec2 = self.ec2
        return {
            "ok": ec2 is not None and ec2.last_error is None,
            "ec2_endpoint": self.ec2_endpoint,
            "ec2_error": ec2.last_error if ec2 else None,
            "ec2_polls": ec2.polls if ec2 else 0,
            "instances": sorted(self.engine.true_models) if self.engine else [],
            "faults": len(self.engine.faults) if self.engine else 0,
            "requests": self.handler.requests if self.handler else 0,
            # None: EC2 runs elsewhere, followed by polling; else answers served before the
            # view caught up with EC2 (EC2 unreadable, or FENCE_S passed).
            "late_answers": self.fence.late if self.fence else None,
            "uptime_s": round(time.monotonic() - self._started_at, 3),
        }


def _url(sockaddr) -> str:
    host, port = sockaddr[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"
