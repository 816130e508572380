"""The gate's HTTP front: parse an EC2 Query request, validate it, apply the request and
response fault stages, dispatch it by action and answer; plus the gate's lifecycle (one
event loop in a background thread) and its thread-side API (`owners()`, `wait_change()`,
`resync()`).

Dispatch: a DryRun call is forwarded (the upstream answers DryRunOperation or
UnauthorizedOperation; nothing changes); an action with a handler (actions.py's registry:
instances.py, interfaces.py, addresses.py, subnets.py) is served by it; any other read is
forwarded untouched, any other write forwarded and followed by a resync (backend.py).
"""

from __future__ import annotations

import functools
import logging

from aiohttp import web

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud.acted_on import acted_on
from cnikit.cloud.after_call import INSTANCE_HEADER, AfterCall, AnsweredCall, caller_instance
from cnikit.cloud.audit import CALLER
from cnikit.cloud.control import ControlApi
from cnikit.cloud.ec2_actions import is_read, is_world_write, service_model
from cnikit.cloud.errors import Ec2Error, dry_run_passed, internal_error, missing
from cnikit.cloud.gate.actions import handlers
from cnikit.cloud.gate.backend import Backend, UpstreamError, UpstreamUnreachable
from cnikit.cloud.loop_thread import LoopThread
from cnikit.cloud.models import Mirror
from cnikit.cloud.ownership import OwnershipSnapshot
from cnikit.cloud.regions import check_region
from cnikit.errors import CnikitError
from faultcore import freshness
from faultcore.caller import spared as _spared

log = logging.getLogger("cnikit.cloud.gate")

THROTTLED = "RequestLimitExceeded"  # EC2's throttling code (the throttle fault answers it)
CONTROL = "/_cnikit/"


@functools.cache
def _required_params() -> dict[str, list[str]]:
    """Operation name -> top-level parameters EC2 requires (from botocore's own model)."""
    model = service_model()
    out = {}
    for name in model.operation_names:
        shape = model.operation_model(name).input_shape
        req = []
        if shape is not None:
            for member in shape.required_members:
                m = shape.members[member]
                loc = m.serialization.get("queryName") or m.serialization.get("name")
                req.append(loc[0].upper() + loc[1:] if loc else member)
        out[name] = req
    return out


class Gate(LoopThread, Backend):
    """The gate in a background thread: the HTTP front of its backend (backend.py). `url`
    is valid after `start()`."""

    thread_name = "ec2-gate"

    def __init__(self, upstream_url: str, region: str = "us-east-1", host: str = "127.0.0.1",
                 port: int = 0, seed: int | None = None):
        super().__init__(upstream_url, region, seed)
        self.host = host
        self.port = port
        self.url = ""
        self._required = _required_params()
        self._control = ControlApi(self, CONTROL)
        self._runner: web.AppRunner | None = None
        self._handlers = handlers(self)
        # Hooks run once a call is served, before its answer leaves (crash points).
        self.after = AfterCall()
        # Writes that may change instances, subnets or VPCs (is_world_write), failed ones
        # too (a needless refresh at worst): the owners feed carries the count.
        self.world_writes = 0

    # -- lifecycle (called from any thread) -----------------------------------------------------

    def stop(self) -> None:
        if self._loop is not None and self.url:
            freshness.unregister(self.url)
        super().stop()

    def add_listener(self, sock) -> None:
        """Also serve a pre-bound listening socket (e.g. one made inside the VPC netns)."""
        # A busy machine can keep the gate's loop from it for seconds: the bound only turns a
        # dead gate thread into an error (as fault_imds.server's add_listener).
        self._run(self._add_site(sock), 60)

    def serve_nemesis(self, served) -> None:
        """Take nemesis actions at $GATE/nemesis (cnikit.cluster.actions.Served; None: stop)."""
        self._control.serve_nemesis(served)

    def _version(self) -> int:
        return self.versions.value

    def regions(self) -> list[str]:
        """The regions the gate serves, its own first, then in the order requests named them."""
        return list(self.versions.regions)

    def owners(self, region: str | None = None) -> OwnershipSnapshot:
        """Who holds what in `region` (default: the gate's own); a region no request has
        named yet is loaded from the upstream first."""
        mirror = self._mirror_of(region)
        with self._cond:
            return mirror.snapshot()

    def wait_change(self, since_version: int, timeout: float,
                    region: str | None = None) -> OwnershipSnapshot:
        """The snapshot once the version exceeds since_version (a change in any region), or
        the current one at timeout."""
        mirror = self._mirror_of(region)
        with self._cond:
            self._cond.wait_for(lambda: self.versions.value > since_version, timeout)
            return mirror.snapshot()

    def resync(self) -> None:
        """Reload every region's mirror from the upstream (after something changed it behind
        the gate)."""
        self._run(self._locked_resync(), 60)

    def _mirror_of(self, region: str | None) -> Mirror:
        if region is None or region == self.region:
            return self.mirror
        known = self._regions.get(region)
        if known is None:
            known = self._run(self._region(check_region(region)), 60)
        return known.mirror

    async def _startup(self) -> None:
        await self._open()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            raise CnikitError(f"EC2 gate cannot listen on {self.host}:{self.port}: {e}") from None
        self.port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{self.port}"
        # A fault IMDS in this process answers no older than this (faultcore.freshness).
        freshness.register(self.url, self._version)

    async def _shutdown(self) -> None:
        # Long polls of the change feed (the IMDS's) end now: cleanup waits for every handler.
        self.closing = True
        self.transitions.cancel_all()
        if self._changed is not None:
            self._changed.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._upstream is not None:
            await self._upstream.close()

    async def _add_site(self, sock) -> None:
        site = web.SockSite(self._runner, sock)
        await site.start()

    # -- request entry point --------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith(CONTROL):
            return await self._control.handle(request)
        action = "?"
        params: dict[str, str] = {}
        region = self.region
        node = None  # the instance the call acts on, when a hook needs it
        try:
            body = await request.read()
            params = Q.parse_params(body, request.query_string)
            action = params.get("Action") or ""
            region = Q.signed_region(request.headers, params) or self.region
            CALLER.set(Q.signed_access_key(request.headers, params))
            self._validate(action, params)
            if not _spared(request.headers):
                try:
                    await self.faults.before_call(action, region, params)
                except Ec2Error as e:
                    e.injected = True  # the audit tells a fault's answer from EC2's
                    if e.code == THROTTLED:  # reads too: how a caller retries (check.cost)
                        self.audit.throttle(action, request.remote,
                                            request.headers.get(INSTANCE_HEADER),
                                            self._acted_on(region, params))
                    raise
            r = self._regions.get(region) or await self._region(region)
            # Read before the call changes the mirror: a detach still names its instance.
            node = acted_on(r.mirror, params) if self.after else None
            handler = self._handlers.get(action)
            if Q.bool_param(params, "DryRun"):
                # The upstream answers DryRunOperation/UnauthorizedOperation, the gate for an
                # action the upstream does not know; nothing changes.
                if getattr(handler, "gate_only", False):
                    dry = dry_run_passed()
                    status, out = dry.status, R.error_xml(dry)
                else:
                    status, out = await self.forward(region, params, request.headers)
            elif handler is not None:
                status, out = await handler(r, params, request.headers)
            elif is_read(action):
                status, out = await self.forward(region, params, request.headers)
            else:
                status, out = await self.forward_unmodelled(r, action, params, request.headers)
            if status < 400 and not is_read(action) and not _spared(
                    request.headers):
                lost = self.faults.on_response(action, region)
                if lost is not None:  # the change stands; only its answer is lost
                    status, out = lost.status, R.error_xml(lost)
        except Ec2Error as e:
            self._audit_refusal(region, action, params, e.code, e.injected)
            status, out = e.status, R.error_xml(e)
        except UpstreamError as e:
            self._audit_refusal(region, action, params, e.code())
            status, out = e.status, e.body
        except UpstreamUnreachable as e:
            log.warning("%s", e)
            self._audit_refusal(region, action, params, "Unavailable")
            err = Ec2Error("Unavailable", "The service is unavailable. Retry your request.", 503)
            status, out = err.status, R.error_xml(err)
        except Exception:  # noqa: BLE001 - a gate bug must answer EC2's InternalError, not a traceback
            log.exception("EC2 gate failed on %s", action)
            self._audit_refusal(region, action, params, "InternalError")
            err = internal_error()
            status, out = err.status, R.error_xml(err)
        if is_world_write(action):
            # Counted once the call is done and before anything awaits, so the owners feed's
            # next answer (woken by the call's own change) already carries it.
            self.world_writes += 1
        if self.after and action and not _spared(request.headers):
            await self._after(request, action, region, params, status, node)
        return web.Response(status=status, body=out, content_type="text/xml")

    def _acted_on(self, region: str, params: dict[str, str]) -> str | None:
        """The instance a call acts on (cnikit.cloud.acted_on), in a region loaded already."""
        r = self._regions.get(region)
        return acted_on(r.mirror if r is not None else None, params)

    async def _after(self, request: web.Request, action: str, region: str,
                     params: dict[str, str], status: int, node: str | None) -> None:
        """The after-call hooks (cnikit.cloud.after_call), knowing the calling instance
        and the one the call acted on (`node`, read before the call; None: the caller's)."""
        r = self._regions.get(region)
        with self._cond:
            snap = (r or self._regions[self.region]).mirror.snapshot()
        source = request.remote
        caller = caller_instance(request.headers, source, snap)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        await self.after.fire(AnsweredCall(action, region, status, caller, source,
                                           dict(params), node or caller,
                                           peer[1] if peer else None))

    def _validate(self, action: str, params: dict[str, str]) -> None:
        if not action:
            raise Ec2Error("MissingAction", "The request must contain the parameter Action")
        required = self._required.get(action)
        if required is None:
            raise Ec2Error("InvalidAction",
                           f"The action {action} is not valid for this web service.")
        for name in required:
            if name not in params and not any(k.startswith(name + ".") for k in params):
                raise missing(name)

    def _audit_refusal(self, region: str, action: str, params: dict[str, str],
                       code: str, injected: bool = False) -> None:
        if action and not is_read(action) and action in self._required:
            self.audit.add(action, params.get("NetworkInterfaceId"),
                           Q.list_param(params, "PrivateIpAddress"),
                           Q.list_param(params, "Ipv4Prefix"), outcome=code,
                           instance_id=params.get("InstanceId"), region=region,
                           injected=injected)
