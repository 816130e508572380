"""The store's HTTP front and lifecycle: aiohttp in a background thread of the kit's process
(like the EC2 gate), serving cnikit.kube.objects over an API server's REST paths.

    api = KubeApi().start()        # api.url: http://127.0.0.1:PORT
    api.add_listener(sock)         # also serve a socket bound inside the VPC namespace
    api.objects                    # the same objects, for the kit's own threads
    api.stop()

Plain HTTP, no authentication: what reaches it is the run's own VPC and this machine's
loopback. Verbs: get, list, watch (`?watch=1`, newline-delimited events, resuming from a
resourceVersion), create, update, patch (merge, JSON and strategic merge), delete and
deletecollection; the `status` subresource is the object itself."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from cnikit.cloud.loop_thread import LoopThread
from cnikit.kube import discovery, paths
from cnikit.kube.kinds import STATUS, Kind
from cnikit.kube.objects import ApiError, Event, Objects
from cnikit.kube.patch import TYPES
from cnikit.kube.selectors import Selector, SelectorError

log = logging.getLogger("cnikit.kube")
CLOSED = None  # what a watch's queue gets when the server stops


def _json(body: dict, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _error(e: ApiError) -> web.Response:
    return _json(e.status(), e.code)


def _answer(make):
    """A handler answering make(request) (aiohttp takes coroutines only)."""
    async def handler(request: web.Request) -> web.Response:
        return make(request)
    return handler


class KubeApi(LoopThread):
    thread_name = "kube-api"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, objects: Objects | None = None):
        self.host, self.port = host, port
        self.objects = objects or Objects()
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._watches: set[asyncio.Queue] = set()

    # -- lifecycle (any thread) --------------------------------------------------------------

    def add_listener(self, sock) -> None:
        """Also serve a pre-bound listening socket (one made inside the VPC namespace)."""
        self._run(web.SockSite(self._runner, sock).start(), 60)

    async def _startup(self) -> None:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_get("/version", _answer(lambda r: _json(discovery.VERSION)))
        app.router.add_get("/api", _answer(lambda r: _json(discovery.api_versions())))
        app.router.add_get("/apis", _answer(
            lambda r: _json(discovery.api_groups(self.objects.kinds))))
        app.router.add_get("/api/v1", _answer(lambda r: self._resources("", "v1")))
        app.router.add_get("/apis/{group}", _answer(self._group))
        app.router.add_get("/apis/{group}/{version}", _answer(
            lambda r: self._resources(r.match_info["group"], r.match_info["version"])))
        app.router.add_route("*", "/api/v1/{tail:.+}", self._handle)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{self.port}"

    async def _shutdown(self) -> None:
        for queue in list(self._watches):  # open watches end now: cleanup waits for them
            queue.put_nowait(CLOSED)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- discovery ---------------------------------------------------------------------------

    def _resources(self, group: str, version: str) -> web.Response:
        listed = discovery.resources(self.objects.kinds, group, version)
        if listed is None:
            return _error(ApiError(404, "NotFound", f"no kinds are served at {group}/{version}"))
        return _json(listed)

    def _group(self, request: web.Request) -> web.Response:
        group = discovery.api_group(self.objects.kinds, request.match_info["group"])
        if group is None:
            return _error(ApiError(404, "NotFound", "no such group"))
        return _json(group)

    # -- objects -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info.get("group", "")
        version = request.match_info.get("version", "v1")
        where = paths.parse(group, version, request.match_info["tail"])
        try:
            if where is None or (where.subresource not in (None, STATUS)):
                raise ApiError(404, "NotFound", f"the server could not find {request.path}")
            body = await self._body(request)
            kind = self._kind(where, request.method, body)
            return await self._serve(request, kind, where, body)
        except ApiError as e:
            return _error(e)
        except SelectorError as e:
            return _error(ApiError(400, "BadRequest", str(e)))

    async def _body(self, request: web.Request):
        if request.method not in ("POST", "PUT", "PATCH"):
            return None
        try:
            return json.loads(await request.read() or b"null")
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None

    def _kind(self, where: paths.ResourcePath, method: str, body) -> Kind:
        kind = self.objects.kinds.find(where.group, where.version, where.plural)
        if kind is not None:
            return kind
        # The first object of a custom kind nobody declared registers it (an operator whose
        # CRDs a build does not ship still runs); the core group has only its built-ins.
        if method == "POST" and where.group and isinstance(body, dict) and body.get("kind"):
            return self.objects.kinds.add(Kind(where.group, where.version, body["kind"],
                                               where.plural, where.namespace is not None))
        raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                       f"({where.plural}.{where.group or 'core'}/{where.version})")

    async def _serve(self, request: web.Request, kind: Kind, where: paths.ResourcePath,
                     body) -> web.StreamResponse:
        o, ns, name, method = self.objects, where.namespace, where.name, request.method
        q = request.query
        if name is None:
            selector = Selector(q.get("labelSelector"), q.get("fieldSelector"))
            if method == "GET" and q.get("watch") in ("1", "true", "True"):
                return await self._watch(request, kind, ns, selector)
            if method == "GET":
                items, rv = o.list(kind, ns, selector)
                return _json({"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                              "metadata": {"resourceVersion": str(rv)}, "items": items})
            if method == "POST":
                return _json(o.create(kind, ns, self._object(body)), 201)
            if method == "DELETE":
                items, _ = o.list(kind, ns, selector)
                gone = [o.delete(kind, ns, i["metadata"]["name"]) for i in items]
                return _json({"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                              "metadata": {}, "items": gone})
        else:
            if method == "GET":
                return _json(o.get(kind, ns, name))
            if method == "PUT":
                return _json(o.update(kind, ns, name, self._object(body)))
            if method == "PATCH":
                content_type = request.content_type
                if content_type not in TYPES:
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format - "
                                   f"accepted media types include: {', '.join(TYPES)}")
                return _json(o.patch(kind, ns, name, content_type, body))
            if method == "DELETE":
                return _json(o.delete(kind, ns, name))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    @staticmethod
    def _object(body) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not a JSON object")
        return body

    async def _watch(self, request: web.Request, kind: Kind, namespace: str | None,
                     selector: Selector) -> web.StreamResponse:
        """Newline-delimited {"type", "object"} events until timeoutSeconds, the client
        leaving or the server stopping. An object that starts or stops matching the
        selectors is ADDED or DELETED, as an API server's watch cache says it."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        first, stop = self.objects.watch(
            kind, request.query.get("resourceVersion"),
            lambda event: loop.call_soon_threadsafe(queue.put_nowait, event))
        self._watches.add(queue)
        try:
            timeout = float(request.query.get("timeoutSeconds") or 0) or None
        except ValueError:
            timeout = None
        deadline = loop.time() + timeout if timeout else None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            for event in first:
                await self._send(response, event, namespace, selector)
            while True:
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    break
                try:
                    event = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if event is CLOSED:
                    break
                await self._send(response, event, namespace, selector)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away: its watch ends with it
        finally:
            stop()
            self._watches.discard(queue)
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, event: Event, namespace: str | None,
                    selector: Selector) -> None:
        def seen(obj: dict | None) -> bool:
            return obj is not None and (namespace is None or obj["metadata"].get(
                "namespace") == namespace) and selector.matches(obj)

        now, before = seen(event.obj), event.type != "ADDED" and seen(event.old)
        if event.type == "DELETED":
            kind = "DELETED" if before else None
        elif now:
            kind = "MODIFIED" if before else "ADDED"
        else:
            kind = "DELETED" if before else None
        if kind is not None:
            line = json.dumps({"type": kind, "object": event.obj}) + "\n"
            await response.write(line.encode())
