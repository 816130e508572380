"""The EC2 gate: an HTTP front speaking the EC2 Query protocol in front of moto/LocalStack.

Why: moto hands out duplicate and reserved IPs, ignores limits and prefix delegation and
loops forever on a full subnet (moto 5.2; tests/unit/test_gate_rules.py). A chaos kit whose
EC2 can itself double-assign an IP would blame CNIs for its own bugs, so every client talks
to the gate instead.

How it works
- aiohttp serves (`web.SockSite` makes `add_listener(sock)` trivial: the fabric hands a
  socket bound inside the VPC namespace); a small pooled keep-alive client (upstream.py)
  forwards to the upstream. Both run on one event loop in a background thread.
- The gate keeps a mirror of subnets, instances and ENIs (models.py), loaded from the
  upstream at start and updated after each successful mutating call it forwarded; any
  mutating call it does not model (CreateVpc, CreateTags, ...) is forwarded and followed by
  a full resync. Mutating calls are serialised by one lock, so two concurrent requests can
  never be given the same IP.
- The gate decides every address itself (count-based Assign, CreateNetworkInterface and
  RunInstances primaries) and forwards explicit addresses, so the upstream never chooses.
  Prefixes (/28) live only in the gate: moto ignores them.
- DescribeNetworkInterfaces is answered from the mirror, rendered from the upstream's own
  XML for each ENI with the gate's addresses, prefixes and attachment: filters moto crashes
  on work, prefixes show, `describe_lag` renders the state of N seconds ago, and it costs
  no upstream call. Other reads are forwarded untouched.
- Faults (faults/) are applied before a call is served, except to calls the fault IMDS
  marks (faultcore.caller's header): it plays the hypervisor, which EC2 API throttling or
  Describe lag never reach. Every mutating call lands in the audit log (audit.py) with
  its outcome.
- Ownership (`owners()`, `wait_change()`, `GET /_cnikit/owners` in control.py) is served from the mirror,
  one immutable snapshot per version, never by calling the upstream.
- Regions: as EC2 and moto do, the gate serves whatever region a request is signed for (its
  SigV4 credential scope; unsigned requests get the gate's own region). Each region has its
  own mirror (rules never compare addresses across regions) and Describe history; its
  first request loads it from the upstream. Calls the gate makes itself are signed for the
  region they act on. A fault acts on every region unless it names one (`region`); the
  audit log is shared (its records name the region); `owners()` and `wait_change()` serve
  the gate's own region unless asked for another.
- Errors: the gate's own refusals and unexpected failures answer EC2's XML error format
  (`InternalError` 500 for a gate bug, logged); a non-XML upstream error (moto's HTML 500)
  becomes `InternalError` XML too, so clients never see a traceback.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import logging
import threading
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from urllib.parse import urlencode

from aiohttp import web

from cnikit.cloud import responses as R
from cnikit.cloud.audit import AuditLog
from cnikit.cloud.control import ControlApi
from cnikit.cloud.errors import Ec2Error, internal_error, invalid_value, missing
from cnikit.cloud.faults import MAX_LAG_S, FaultSet
from cnikit.cloud.limits import FALLBACK, InstanceLimits
from cnikit.cloud.models import Attachment, Eni, InstanceState, Mirror, Versions
from cnikit.cloud.ownership import OwnershipSnapshot
from cnikit.cloud.regions import check_region, known_regions
from cnikit.cloud.upstream import UpstreamClient
from cnikit.errors import CnikitError
from faultcore import freshness
from faultcore.caller import spared as _spared

log = logging.getLogger("cnikit.cloud.gate")

READ_PREFIXES = ("Describe", "Get", "List", "Search")
CONTROL = "/_cnikit/"
_FORWARD_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token", "user-agent",
                    "content-type")


class UpstreamUnreachable(CnikitError):
    """No HTTP answer from the upstream at all (refused, reset, timed out)."""


class UpstreamError(Exception):
    """The upstream refused a call: pass its answer through unchanged."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body

    def code(self) -> str:
        parsed = R.upstream_error(self.body)
        return parsed[0] if parsed else f"HTTP{self.status}"


@functools.cache
def _required_params() -> dict[str, list[str]]:
    """Operation name -> top-level parameters EC2 requires (from botocore's own model)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
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


class Region:
    """One region the gate serves: its mirror and its ENIs' recent past (for describe_lag)."""

    def __init__(self, name: str, mirror: Mirror):
        self.name = name
        self.mirror = mirror
        self.history: collections.deque[tuple[float, dict[str, Eni]]] = collections.deque()


class Gate:
    """The gate in a background thread. `url` is valid after `start()`."""

    def __init__(self, upstream_url: str, region: str = "us-east-1", host: str = "127.0.0.1",
                 port: int = 0, seed: int | None = None):
        self.upstream_url = upstream_url.rstrip("/")
        self.region = check_region(region)
        self.host = host
        self.port = port
        self.url = ""
        self.faults = FaultSet(seed)
        self.audit = AuditLog()
        self.versions = Versions((region,))
        self.mirror = Mirror(self._limits_for, region, self.versions)  # the gate's own region
        self._regions = {region: Region(region, self.mirror)}
        self._limits: dict[str, InstanceLimits | None] = {}
        self._required = _required_params()
        self._cond = threading.Condition(threading.RLock())
        self._control = ControlApi(self, CONTROL)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._upstream: UpstreamClient | None = None
        self._lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        self._closing = False
        self._handlers = {
            "AssignPrivateIpAddresses": self._assign,
            "UnassignPrivateIpAddresses": self._unassign,
            "CreateNetworkInterface": self._create_eni,
            "DeleteNetworkInterface": self._delete_eni,
            "AttachNetworkInterface": self._attach,
            "DetachNetworkInterface": self._detach,
            "RunInstances": self._run_instances,
            "TerminateInstances": self._terminate,
            "DescribeNetworkInterfaces": self._describe_enis,
            "DescribeSubnets": self._describe_subnets,
        }

    # -- lifecycle (called from any thread) -----------------------------------------------------

    def start(self, timeout: float = 60.0) -> Gate:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ec2-gate",
                                        daemon=True)
        self._thread.start()
        try:
            self._run(self._startup(), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        if self.url:
            freshness.unregister(self.url)
        if self._loop.is_running():
            try:
                self._run(self._shutdown(), 10)
            except Exception:  # noqa: BLE001 - stopping must not fail on a half-started gate
                log.exception("gate shutdown")
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
        self._loop = None

    def add_listener(self, sock) -> None:
        """Also serve a pre-bound listening socket (e.g. one made inside the VPC netns)."""
        self._run(self._add_site(sock), 10)

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

    def _run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _startup(self) -> None:
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._upstream = UpstreamClient(self.upstream_url)
        await self._first_resync(self._regions[self.region])
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

    async def _first_resync(self, r: Region, deadline_s: float = 30.0) -> None:
        """Load the mirror; an upstream that has just started may answer 5xx for a moment."""
        end = time.monotonic() + deadline_s
        while True:
            try:
                return await self._resync(r)
            except UpstreamError as e:
                if e.status < 500 or time.monotonic() > end:
                    raise CnikitError(f"EC2 gate cannot read the upstream {self.upstream_url}: "
                                      f"{e.code()}") from None
            await asyncio.sleep(0.2)

    async def _shutdown(self) -> None:
        # Long polls of the change feed (the IMDS's) end now: cleanup waits for every handler.
        self._closing = True
        if self._changed is not None:
            self._changed.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._upstream is not None:
            await self._upstream.close()

    async def _add_site(self, sock) -> None:
        site = web.SockSite(self._runner, sock)
        await site.start()

    # -- upstream -----------------------------------------------------------------------------

    def _headers(self, region: str, incoming=None) -> dict[str, str]:
        if incoming is not None:
            h = {k: v for k, v in incoming.items() if k.lower() in _FORWARD_HEADERS}
            if "Authorization" in h or "authorization" in h:
                h["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
                return h
        day = datetime.now(UTC).strftime("%Y%m%d")
        return {
            "Authorization": f"AWS4-HMAC-SHA256 Credential=test/{day}/{region}/ec2/"
                             "aws4_request, SignedHeaders=host, Signature=0",
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
        }

    async def _forward(self, region: str, params: dict[str, str],
                       headers=None) -> tuple[int, bytes]:
        """Send a call to the upstream, signed for `region` (a client's own headers carry
        the client's signature, which names the same region)."""
        params.setdefault("Version", "2016-11-15")
        try:
            status, body = await self._upstream.post(urlencode(params).encode(),
                                                     self._headers(region, headers))
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
            raise UpstreamUnreachable(f"the EC2 upstream {self.upstream_url} failed on "
                                      f"{params.get('Action')}: {e!r}") from None
        if status >= 400 and R.upstream_error(body) is None:
            log.warning("upstream answered %s to %s without an EC2 error: %.200r",
                        status, params.get("Action"), body)
            err = internal_error()
            return err.status, R.error_xml(err)
        return status, body

    async def _call(self, region: str, action: str, params: dict[str, str] | None = None,
                    headers=None) -> bytes:
        status, body = await self._forward(region, {"Action": action, **(params or {})},
                                           headers)
        if status >= 300:
            raise UpstreamError(status, body)
        return body

    # -- mirror maintenance ---------------------------------------------------------------------

    def _limits_for(self, instance_type: str) -> InstanceLimits | None:
        return self._limits.get(instance_type)

    async def _ensure_limits(self, instance_type: str) -> InstanceLimits | None:
        if instance_type in self._limits:
            return self._limits[instance_type]
        found = None
        try:
            body = await self._call(self.region, "DescribeInstanceTypes",
                                    {"InstanceType.1": instance_type})
            found = R.limits_from_describe(body).get(instance_type)
        except UpstreamError:
            pass
        self._limits[instance_type] = found or FALLBACK.get(instance_type)
        return self._limits[instance_type]

    async def _locked_resync(self) -> None:
        async with self._lock:
            for r in list(self._regions.values()):
                await self._resync(r)

    async def _region(self, name: str) -> Region:
        """The region a request named, loaded from the upstream on its first request."""
        r = self._regions.get(name)
        if r is not None:
            return r
        if name not in known_regions():
            raise Ec2Error("AuthFailure",
                           f"Credential should be scoped to a valid region, not '{name}'.", 401)
        async with self._lock:
            r = self._regions.get(name)
            if r is None:
                r = Region(name, Mirror(self._limits_for, name, self.versions))
                await self._resync(r, adopt=True)
            return r

    async def _resync(self, r: Region, adopt: bool = False) -> None:
        subnets = R.subnets_from_describe(await self._call(r.name, "DescribeSubnets"))
        instances = R.instances_from(await self._call(r.name, "DescribeInstances"))
        items = R.enis_from_describe(await self._call(r.name, "DescribeNetworkInterfaces"))
        for t in {i.instance_type for i in instances}:
            await self._ensure_limits(t)
        old = r.mirror.enis
        enis = []
        for it in items:
            eni_id = it.findtext("networkInterfaceId")
            enis.append(R.eni_from_item(it, old[eni_id].prefixes if eni_id in old else ()))

        def load():
            if adopt:  # a new region joins in the same change its first state lands in
                self._regions[r.name] = r
                self.versions.regions += (r.name,)
            r.mirror.load(subnets, instances, enis)

        self._mutate(r, load)

    def _mutate(self, r: Region, fn, *args) -> None:
        """Change a region's mirror (loop thread only) and wake every waiter."""
        with self._cond:
            fn(*args)
            self._cond.notify_all()
        now = time.monotonic()
        r.history.append((now, dict(r.mirror.enis)))
        while len(r.history) > 1 and r.history[1][0] <= now - MAX_LAG_S:
            r.history.popleft()
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    def _enis_as_of(r: Region, lag: float) -> dict[str, Eni]:
        if lag <= 0 or not r.history:
            return r.mirror.enis
        cutoff = time.monotonic() - lag
        chosen = r.history[0][1]
        for t, enis in r.history:
            if t > cutoff:
                break
            chosen = enis
        return chosen

    # -- request entry point --------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith(CONTROL):
            return await self._control.handle(request)
        action = "?"
        params: dict[str, str] = {}
        region = self.region
        try:
            body = await request.read()
            params = R.parse_params(body, request.query_string)
            action = params.get("Action") or ""
            region = R.signed_region(request.headers, params) or self.region
            self._validate(action, params)
            if not _spared(request.headers):
                delay, fault = self.faults.on_request(action, region)
                if delay:
                    await asyncio.sleep(delay)
                if fault is not None:
                    raise fault
            r = self._regions.get(region) or await self._region(region)
            handler = self._handlers.get(action)
            if R.bool_param(params, "DryRun"):
                # The upstream answers DryRunOperation/UnauthorizedOperation; nothing changes.
                status, out = await self._forward(region, params, request.headers)
            elif handler is not None:
                status, out = await handler(r, params, request.headers)
            elif action.startswith(READ_PREFIXES):
                status, out = await self._forward(region, params, request.headers)
            else:
                status, out = await self._unmodelled(r, action, params, request.headers)
            if status < 400 and not action.startswith(READ_PREFIXES) and not _spared(
                    request.headers):
                lost = self.faults.on_response(action, region)
                if lost is not None:  # the change stands; only its answer is lost
                    status, out = lost.status, R.error_xml(lost)
        except Ec2Error as e:
            self._audit_refusal(region, action, params, e.code)
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
        return web.Response(status=status, body=out, content_type="text/xml")

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
                       code: str) -> None:
        if action and not action.startswith(READ_PREFIXES) and action in self._required:
            self.audit.add(action, params.get("NetworkInterfaceId"),
                           R.list_param(params, "PrivateIpAddress"),
                           R.list_param(params, "Ipv4Prefix"), outcome=code,
                           instance_id=params.get("InstanceId"), region=region)

    async def _unmodelled(self, r: Region, action, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            status, out = await self._forward(r.name, params, headers)
            if status < 300:
                await self._resync(r)
                self.audit.add(action, params.get("NetworkInterfaceId"),
                               instance_id=params.get("InstanceId"), region=r.name)
            else:
                raise UpstreamError(status, out)
        return status, out

    # -- modelled actions ---------------------------------------------------------------------------

    async def _assign(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self._lock:
            eni = mirror.eni(params.get("NetworkInterfaceId"))
            if eni.attachment:
                inst = mirror.instances.get(eni.attachment.instance_id)
                if inst:
                    await self._ensure_limits(inst.instance_type)
            plan = mirror.plan_assign(
                eni.eni_id,
                R.list_param(params, "PrivateIpAddress"),
                R.int_param(params, "SecondaryPrivateIpAddressCount"),
                R.list_param(params, "Ipv4Prefix"),
                R.int_param(params, "Ipv4PrefixCount"),
                R.bool_param(params, "AllowReassignment"),
            )
            for ip, holder in plan.moves.items():
                await self._call(r.name, "UnassignPrivateIpAddresses",
                                 {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip}, headers)
            if plan.ips:
                fwd = {"NetworkInterfaceId": eni.eni_id}
                fwd.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(plan.ips, 1)})
                try:
                    await self._call(r.name, "AssignPrivateIpAddresses", fwd, headers)
                except UpstreamError:
                    for ip, holder in plan.moves.items():  # put moved IPs back
                        await self._call(r.name, "AssignPrivateIpAddresses",
                                         {"NetworkInterfaceId": holder, "PrivateIpAddress.1": ip})
                    raise
            self._mutate(r, mirror.apply_assign, plan)
            self.audit.add("AssignPrivateIpAddresses", eni.eni_id, plan.ips, plan.prefixes,
                           region=r.name)
        return 200, R.assign_xml(eni.eni_id, plan.ips, plan.prefixes)

    async def _unassign(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            ips = R.list_param(params, "PrivateIpAddress")
            prefixes = R.list_param(params, "Ipv4Prefix")
            eni = r.mirror.plan_unassign(params.get("NetworkInterfaceId"), ips, prefixes)
            if ips:
                fwd = {"NetworkInterfaceId": eni.eni_id}
                fwd.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(ips, 1)})
                await self._call(r.name, "UnassignPrivateIpAddresses", fwd, headers)
            self._mutate(r, r.mirror.apply_unassign, eni.eni_id, ips, prefixes)
            self.audit.add("UnassignPrivateIpAddresses", eni.eni_id, ips, prefixes,
                           region=r.name)
        return 200, R.return_true_xml("UnassignPrivateIpAddresses")

    async def _create_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            secondaries = [
                ip for ip, primary in zip(
                    R.list_param(params, "PrivateIpAddresses", "PrivateIpAddress"),
                    R.list_param(params, "PrivateIpAddresses", "Primary"), strict=False)
                if primary.lower() != "true"
            ]
            primary = params.get("PrivateIpAddress") or next(
                (ip for ip, p in zip(R.list_param(params, "PrivateIpAddresses", "PrivateIpAddress"),
                                     R.list_param(params, "PrivateIpAddresses", "Primary"),
                                     strict=False) if p.lower() == "true"), None)
            subnet, ips, prefixes = r.mirror.plan_new_eni(
                params.get("SubnetId"), primary, secondaries,
                R.int_param(params, "SecondaryPrivateIpAddressCount"),
                R.list_param(params, "Ipv4Prefix", "Ipv4Prefix"),
                R.int_param(params, "Ipv4PrefixCount"),
            )
            fwd = {k: v for k, v in params.items()
                   if not k.startswith(("PrivateIpAddresses.", "Ipv4Prefix"))
                   and k not in ("SecondaryPrivateIpAddressCount", "PrivateIpAddress")}
            fwd["PrivateIpAddress"] = ips[0]
            body = await self._call(r.name, "CreateNetworkInterface", fwd, headers)
            item = R.parse_xml(body).find("networkInterface")
            item.tag = "item"
            eni = R.eni_from_item(item)
            if len(ips) > 1:
                extra = {"NetworkInterfaceId": eni.eni_id}
                extra.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(ips[1:], 1)})
                try:
                    await self._call(r.name, "AssignPrivateIpAddresses", extra, headers)
                except UpstreamError:  # all or nothing, as EC2: take the new ENI back
                    await self._call(r.name, "DeleteNetworkInterface",
                                     {"NetworkInterfaceId": eni.eni_id})
                    raise
            eni = Eni(eni.eni_id, subnet.subnet_id, subnet.vpc_id, eni.mac, tuple(ips),
                      tuple(prefixes), None, eni.template)
            self._mutate(r, _put_eni, r.mirror, eni)
            self.audit.add("CreateNetworkInterface", eni.eni_id, ips, prefixes, region=r.name)
        return 200, R.created_eni_xml(eni)

    async def _delete_eni(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            eni = r.mirror.plan_delete(params.get("NetworkInterfaceId"))
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            self._mutate(r, _drop_eni, r.mirror, eni.eni_id)
            self.audit.add("DeleteNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           region=r.name)
        return status, out

    async def _attach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            inst = r.mirror.instance(params.get("InstanceId"))
            await self._ensure_limits(inst.instance_type)
            device = R.int_param(params, "DeviceIndex")
            eni, inst = r.mirror.plan_attach(params.get("NetworkInterfaceId"),
                                             inst.instance_id, device)
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            att = Attachment(
                attachment_id=R.parse_xml(out).findtext("attachmentId") or "",
                instance_id=inst.instance_id, device_index=device,
                delete_on_termination=False, attach_time=_now_iso())
            self._mutate(r, r.mirror.set_attachment, eni.eni_id, att)
            self.audit.add("AttachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=inst.instance_id, region=r.name)
        return status, out

    async def _detach(self, r: Region, params, headers) -> tuple[int, bytes]:
        async with self._lock:
            eni = r.mirror.plan_detach(params.get("AttachmentId"))
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            self._mutate(r, r.mirror.set_attachment, eni.eni_id, None)
            self.audit.add("DetachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=eni.attachment.instance_id, region=r.name)
        return status, out

    async def _run_instances(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self._lock:
            itype = params.get("InstanceType") or "m1.small"
            if await self._ensure_limits(itype) is None:
                raise invalid_value(f"Invalid value '{itype}' for InstanceType.")
            count = R.int_param(params, "MaxCount") or 1
            min_count = R.int_param(params, "MinCount") or 1
            if count < 1 or min_count < 1 or min_count > count:
                raise invalid_value(f"Invalid MinCount {min_count} / MaxCount {count}")
            nic = "NetworkInterface.1."
            if params.get(nic + "NetworkInterfaceId"):  # launched on an existing ENI
                status, out = await self._forward(r.name, params, headers)
                if status >= 300:
                    raise UpstreamError(status, out)
                await self._resync(r)
                return status, out
            uses_nic = any(k.startswith(nic) for k in params)
            subnet_id = params.get("SubnetId") or params.get(nic + "SubnetId")
            if not subnet_id:
                default = mirror.default_subnet(params.get("Placement.AvailabilityZone"))
                if default is None:
                    raise Ec2Error("MissingInput", "No subnet given and no default subnet found")
                subnet_id = default.subnet_id
            subnet = mirror.subnet(subnet_id)
            asked = params.get("PrivateIpAddress") or params.get(nic + "PrivateIpAddress")
            if asked and count > 1:
                raise invalid_value("A private IP address can only be given for one instance")
            secondary = R.int_param(params, nic + "SecondaryPrivateIpAddressCount") or 0
            limits = self._limits[itype]
            if 1 + secondary > limits.ipv4_per_eni:
                raise Ec2Error("PrivateIpAddressLimitExceeded",
                               "Number of private addresses will exceed limit.")
            plans = []
            taken: set[int] = set()
            for _ in range(count):
                if asked:
                    _, ips, _ = mirror.plan_new_eni(subnet.subnet_id, asked, [], secondary, [],
                                                    None)
                else:  # one pick for all, so two instances of one call never share an address
                    ips = mirror.pick_ips(subnet, 1 + secondary, taken)
                taken.update(int(ipaddress.IPv4Address(i)) for i in ips)
                plans.append(ips)
            bodies = []
            for ips in plans:
                fwd = {k: v for k, v in params.items()
                       if k not in ("MinCount", "MaxCount", "PrivateIpAddress",
                                    nic + "PrivateIpAddress", nic + "SecondaryPrivateIpAddressCount")}
                fwd.update({"MinCount": "1", "MaxCount": "1"})
                fwd[(nic if uses_nic else "") + "PrivateIpAddress"] = ips[0]
                if not uses_nic:
                    fwd["SubnetId"] = subnet.subnet_id
                try:
                    bodies.append(await self._call(r.name, "RunInstances", fwd, headers))
                except UpstreamError:
                    if len(bodies) >= min_count:
                        break
                    raise
                await self._adopt_instances(r, R.instances_from(bodies[-1]), ips[1:], headers)
        return 200, _merge_reservations(bodies)

    async def _adopt_instances(self, r: Region, instances: list[InstanceState],
                               secondaries: list[str], headers) -> None:
        for inst in instances:
            body = await self._call(r.name, "DescribeNetworkInterfaces", {
                "Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": inst.instance_id})
            enis = [R.eni_from_item(it) for it in R.enis_from_describe(body)]
            primary = next((e for e in enis if e.attachment and e.attachment.device_index == 0),
                           None)
            if primary is not None and secondaries:
                fwd = {"NetworkInterfaceId": primary.eni_id}
                fwd.update({f"PrivateIpAddress.{n}": ip for n, ip in enumerate(secondaries, 1)})
                await self._call(r.name, "AssignPrivateIpAddresses", fwd, headers)
                enis = [e if e is not primary else Eni(
                    e.eni_id, e.subnet_id, e.vpc_id, e.mac, e.ips + tuple(secondaries),
                    e.prefixes, e.attachment, e.template) for e in enis]

            def adopt(mirror=r.mirror, inst=inst, enis=enis):
                mirror.put_instance(inst)
                for e in enis:
                    mirror.put_eni(e)
                mirror.changed()

            self._mutate(r, adopt)
            for e in enis:
                self.audit.add("RunInstances", e.eni_id, e.ips, e.prefixes,
                               instance_id=inst.instance_id, region=r.name)

    async def _terminate(self, r: Region, params, headers) -> tuple[int, bytes]:
        mirror = r.mirror
        async with self._lock:
            ids = R.list_param(params, "InstanceId")
            for i in ids:
                mirror.instance(i)
            status, out = await self._forward(r.name, params, headers)
            if status >= 300:
                raise UpstreamError(status, out)
            for iid in ids:
                for eni in mirror.instance_enis(iid):
                    await self._release_eni(r, eni)
                inst = mirror.instances[iid]
                self._mutate(r, mirror.put_instance,
                             InstanceState(iid, inst.instance_type, inst.subnet_id, inst.az,
                                      "terminated"))
                self.audit.add("TerminateInstances", None, instance_id=iid, region=r.name)
        return status, out

    async def _release_eni(self, r: Region, eni: Eni) -> None:
        """What EC2 does to an instance's ENIs on termination: detach, delete if DOT.

        The primary ENI is deleted without a detach upstream: moto's DescribeInstances
        crashes on an instance without device 0.
        """
        if eni.attachment.device_index != 0:
            try:
                await self._call(r.name, "DetachNetworkInterface",
                                 {"AttachmentId": eni.attachment.attachment_id, "Force": "true"})
            except UpstreamError as e:
                log.warning("detach %s on termination: %s", eni.eni_id, e.code())
        if eni.attachment.delete_on_termination:
            try:
                await self._call(r.name, "DeleteNetworkInterface",
                                 {"NetworkInterfaceId": eni.eni_id})
            except UpstreamError as e:
                log.warning("delete %s on termination: %s", eni.eni_id, e.code())
            self._mutate(r, _drop_eni, r.mirror, eni.eni_id)
            self.audit.add("DeleteNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=eni.attachment.instance_id, region=r.name)
        else:
            self._mutate(r, r.mirror.set_attachment, eni.eni_id, None)
            self.audit.add("DetachNetworkInterface", eni.eni_id, eni.ips, eni.prefixes,
                           instance_id=eni.attachment.instance_id, region=r.name)

    async def _describe_subnets(self, r: Region, params, headers) -> tuple[int, bytes]:
        """Forwarded, with AvailableIpAddressCount as EC2 counts it: moto counts neither
        the gate's prefixes nor, reliably, its secondary addresses."""
        status, out = await self._forward(r.name, params, headers)
        if status >= 300:
            raise UpstreamError(status, out)
        return status, R.with_available_counts(out, r.mirror.available_ips)

    async def _describe_enis(self, r: Region, params, headers) -> tuple[int, bytes]:
        enis = self._enis_as_of(r, 0.0 if _spared(headers) else self.faults.describe_lag(r.name))
        wanted = R.filters(params)
        for name in wanted:
            R.check_filter_name(name)
        ids = R.list_param(params, "NetworkInterfaceId")
        if ids:
            missing_ids = [i for i in ids if i not in enis]
            if missing_ids:
                raise Ec2Error("InvalidNetworkInterfaceID.NotFound",
                               f"The networkInterface ID '{missing_ids[0]}' does not exist")
            selected = [enis[i] for i in dict.fromkeys(ids)]
        else:
            selected = list(enis.values())
        selected = [e for e in selected if R.match_filters(e, wanted)]
        max_results = R.int_param(params, "MaxResults")
        start = 0
        token = params.get("NextToken")
        if token:
            if not token.isdigit():
                raise invalid_value(f"Invalid value '{token}' for NextToken")
            start = int(token)
        next_token = None
        if max_results is not None:
            if not 5 <= max_results <= 1000:
                raise invalid_value(f"Value ({max_results}) for parameter maxResults is invalid. "
                                    "Expecting a value between 5 and 1000.")
            if start + max_results < len(selected):
                next_token = str(start + max_results)
            selected = selected[start:start + max_results]
        else:
            selected = selected[start:]
        return 200, R.describe_enis_xml(selected, next_token)

    async def wait_version(self, since: int) -> None:
        """Return once the mirror's version exceeds `since` (event-loop side of wait_change)."""
        while self.mirror.version <= since and not self._closing:
            await self._changed.wait()


def _put_eni(mirror: Mirror, eni: Eni) -> None:
    mirror.put_eni(eni)
    mirror.changed()


def _drop_eni(mirror: Mirror, eni_id: str) -> None:
    mirror.drop_eni(eni_id)
    mirror.changed()


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _merge_reservations(bodies: list[bytes]) -> bytes:
    """One RunInstances answer from several single-instance ones (the gate launches one at a time)."""
    if len(bodies) == 1:
        return bodies[0]
    first = R.parse_xml(bodies[0])
    target = first.find("instancesSet")
    for body in bodies[1:]:
        for item in R.parse_xml(body).findall("instancesSet/item"):
            target.append(item)
    first.set("xmlns", R.NS)
    return R.XML_DECL + ET.tostring(first)
