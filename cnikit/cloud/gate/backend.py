"""What stands behind the gate's HTTP front: the upstream and the gate's mirrors of it.

- Forwarding: a call is sent to the upstream (moto or LocalStack) signed for the region it
  acts on; an upstream refusal is an `UpstreamError` (its answer passed through unchanged),
  no answer at all an `UpstreamUnreachable`, a non-XML error (moto's HTML 500) EC2's
  `InternalError`.
- Regions: each has its own mirror (models.Mirror) and its ENIs' recent past (for
  `describe-lag`); a region's first request loads it from the upstream.
- Changes: every change of a mirror goes through `mutate` (loop thread only), which wakes
  the waiters of `wait_change` and the change feed and records the ENIs for Describe's
  history. A mutating call the gate does not model is forwarded and followed by a resync.
- Limits: per instance type, the kit's table (limits.FALLBACK); a type outside it is asked
  of the upstream once (DescribeInstanceTypes), so a type EC2 knows is never refused.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import logging
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlencode

from cnikit.cloud import responses as R
from cnikit.cloud import upstream_xml as U
from cnikit.cloud.audit import AuditLog
from cnikit.cloud.errors import Ec2Error, internal_error
from cnikit.cloud.faults import MAX_LAG_S, FaultSet
from cnikit.cloud.gate.transition_stage import Transitions
from cnikit.cloud.limits import FALLBACK, InstanceLimits
from cnikit.cloud.models import Mirror, Versions
from cnikit.cloud.records import Eni
from cnikit.cloud.regions import check_region, known_regions
from cnikit.cloud.upstream import UpstreamClient
from cnikit.errors import CnikitError

log = logging.getLogger("cnikit.cloud.gate")

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


class Region:
    """One region the gate serves: its mirror and its ENIs' recent past (for describe-lag)."""

    def __init__(self, name: str, mirror: Mirror):
        self.name = name
        self.mirror = mirror
        self.history: collections.deque[tuple[float, dict[str, Eni]]] = collections.deque()
        # vpc id -> (its given IPv6 /56, the pool it came from): moto keeps none
        # (cnikit/cloud/gate/vpcs.py).
        self.given_ipv6: dict[str, tuple[str, str]] = {}


class Backend:
    """The upstream and the mirrors of every region the gate serves. The event-loop parts
    (`lock`, `_changed`, `_upstream`) are made by `_open`, on the loop; the gate's
    shutdown closes them.

    The gate's action groups (actions.py) work through its public methods: `forward`,
    `pass_through` and `call` to the upstream, `forward_unmodelled` for a write the gate
    does not model, `mutate` to change a mirror, `ensure_limits` and `eni_with_limits` for
    the limits the rules judge against, `enis_as_of` and `addresses_as_of` for Describe's
    lag, all under `lock` when they change anything."""

    def __init__(self, upstream_url: str, region: str = "us-east-1", seed: int | None = None):
        self.upstream_url = upstream_url.rstrip("/")
        self.region = check_region(region)
        self.faults = FaultSet(seed)
        self.audit = AuditLog()
        self.versions = Versions((region,))
        self.mirror = Mirror(self._limits_for, region, self.versions)  # the gate's own region
        self._regions = {region: Region(region, self.mirror)}
        self._limits: dict[str, InstanceLimits | None] = {}
        self._cond = threading.Condition(threading.RLock())
        self._upstream: UpstreamClient | None = None
        # Serialises every mutating call (made on the event loop when the gate starts).
        self.lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        self.closing = False
        self.transitions = Transitions(self)  # attaches and detaches that take time
        # Whether the account may use ENI trunking (trunk ENIs, branch associations): an
        # opt-in EC2 grants per account; on, as for the cluster role the kit plays.
        self.trunking = True

    async def _open(self) -> None:
        self.lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._upstream = UpstreamClient(self.upstream_url)
        await self._first_resync(self._regions[self.region])

    async def wait_version(self, since: int) -> None:
        """Return once the mirror's version exceeds `since` (event-loop side of wait_change)."""
        while self.mirror.version <= since and not self.closing:
            await self._changed.wait()

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

    async def forward(self, region: str, params: dict[str, str],
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

    async def pass_through(self, region: str, params: dict[str, str],
                           headers=None) -> tuple[int, bytes]:
        """A client's call forwarded as it is; a refusal is raised (`UpstreamError`)."""
        status, body = await self.forward(region, params, headers)
        if status >= 300:
            raise UpstreamError(status, body)
        return status, body

    async def call(self, region: str, action: str, params: dict[str, str] | None = None,
                   headers=None) -> bytes:
        status, body = await self.forward(region, {"Action": action, **(params or {})},
                                          headers)
        if status >= 300:
            raise UpstreamError(status, body)
        return body

    async def forward_unmodelled(self, r: Region, action, params, headers) -> tuple[int, bytes]:
        """A write the gate does not model: forwarded, then the region's mirror reloaded."""
        async with self.lock:
            status, out = await self.forward(r.name, params, headers)
            if status < 300:
                await self.resync_region(r)
                self.audit.add(action, params.get("NetworkInterfaceId"),
                               instance_id=params.get("InstanceId"), region=r.name)
            else:
                raise UpstreamError(status, out)
        return status, out

    # -- mirror maintenance ---------------------------------------------------------------------

    def _limits_for(self, instance_type: str) -> InstanceLimits | None:
        return FALLBACK.get(instance_type) or self._limits.get(instance_type)

    async def ensure_limits(self, instance_type: str) -> InstanceLimits | None:
        """The limits the gate enforces and describes for a type: the kit's table, else the
        upstream's figures (None: the upstream knows no such type either)."""
        if instance_type in FALLBACK:
            return FALLBACK[instance_type]
        if instance_type in self._limits:
            return self._limits[instance_type]
        found = None
        try:
            body = await self.call(self.region, "DescribeInstanceTypes",
                                   {"InstanceType.1": instance_type})
            found = U.limits_from_describe(body).get(instance_type)
        except UpstreamError:
            pass
        self._limits[instance_type] = found
        return found

    async def eni_with_limits(self, r: Region, eni_id: str | None) -> Eni:
        """The ENI (EC2's not-found when unknown), its instance type's limits known to the
        mirror first: the address rules judge against them."""
        eni = r.mirror.eni(eni_id)
        if eni.attachment:
            inst = r.mirror.instances.get(eni.attachment.instance_id)
            if inst:
                await self.ensure_limits(inst.instance_type)
        return eni

    async def _first_resync(self, r: Region, deadline_s: float = 30.0) -> None:
        """Load the mirror; an upstream that has just started may answer 5xx for a moment."""
        end = time.monotonic() + deadline_s
        while True:
            try:
                return await self.resync_region(r)
            except UpstreamError as e:
                if e.status < 500 or time.monotonic() > end:
                    raise CnikitError(f"EC2 gate cannot read the upstream {self.upstream_url}: "
                                      f"{e.code()}") from None
            await asyncio.sleep(0.2)

    async def _locked_resync(self) -> None:
        async with self.lock:
            for r in list(self._regions.values()):
                await self.resync_region(r)

    async def _region(self, name: str) -> Region:
        """The region a request named, loaded from the upstream on its first request."""
        r = self._regions.get(name)
        if r is not None:
            return r
        if name not in known_regions():
            raise Ec2Error("AuthFailure",
                           f"Credential should be scoped to a valid region, not '{name}'.", 401)
        async with self.lock:
            r = self._regions.get(name)
            if r is None:
                r = Region(name, Mirror(self._limits_for, name, self.versions))
                await self.resync_region(r, adopt=True)
            return r

    async def resync_region(self, r: Region, adopt: bool = False) -> None:
        """Reload a region's mirror from the upstream (the gate's own prefixes kept)."""
        subnets = U.subnets_from_describe(await self.call(r.name, "DescribeSubnets"))
        instances = U.instances_from(await self.call(r.name, "DescribeInstances"))
        items = U.enis_from_describe(await self.call(r.name, "DescribeNetworkInterfaces"))
        for t in {i.instance_type for i in instances}:
            await self.ensure_limits(t)
        old = r.mirror.enis
        ipv6_only = {s.subnet_id for s in subnets if s.cidr is None}
        enis = []
        for it in items:
            eni_id = it.findtext("networkInterfaceId")
            kept = old.get(eni_id)
            eni = U.eni_from_item(it, kept.prefixes if kept else (),
                                  kept.ipv6_prefixes if kept else ())
            if eni.subnet_id in ipv6_only:  # moto gives such an ENI an IPv4 all the same
                eni = dataclasses.replace(eni, ips=(), prefixes=())
            enis.append(eni)

        def load():
            if adopt:  # a new region joins in the same change its first state lands in
                self._regions[r.name] = r
                self.versions.regions += (r.name,)
            r.mirror.load(subnets, instances, enis)

        self.mutate(r, load)

    def mutate(self, r: Region, fn, *args) -> None:
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
    def enis_as_of(r: Region, lag: float) -> dict[str, Eni]:
        if lag <= 0 or not r.history:
            return r.mirror.enis
        cutoff = time.monotonic() - lag
        chosen = r.history[0][1]
        for t, enis in r.history:
            if t > cutoff:
                break
            chosen = enis
        return chosen

    @staticmethod
    def _state_at(r: Region, t: float) -> dict[str, Eni] | None:
        """The region's ENIs as of monotonic time `t` (None: older than the history kept)."""
        i = bisect.bisect_right(r.history, t, key=lambda h: h[0]) - 1
        return r.history[i][1] if i >= 0 else None

    @classmethod
    def _attached_since(cls, r: Region, eni: Eni, t: float) -> bool:
        """Whether `eni`'s attachment is newer than monotonic time `t`: the region's state
        as of `t` did not show it (a `t` older than the history kept: not newer)."""
        then_all = cls._state_at(r, t)
        if eni.attachment is None or then_all is None:
            return False
        then = then_all.get(eni.eni_id)
        return then is None or then.attachment is None or (
            then.attachment.attachment_id != eni.attachment.attachment_id)

    @classmethod
    def addresses_as_of(cls, r: Region, enis: dict[str, Eni],
                        lags: list[tuple[float, float | None]]) -> dict[str, Eni]:
        """`enis` with each one's address list as of the largest lag covering it (a lag with
        a `since` covers ENIs attached since then): what the ENI held then, its primary
        address alone if it did not exist yet. Attachments are shown as they are."""
        out, states = {}, {}
        for eni_id, eni in enis.items():
            lag = max((s for s, since in lags
                       if since is None or cls._attached_since(r, eni, since)), default=0.0)
            if lag > 0:
                if lag not in states:
                    states[lag] = cls.enis_as_of(r, lag)
                then = states[lag].get(eni_id)
                if then is not None:
                    eni = dataclasses.replace(eni, ips=then.ips, prefixes=then.prefixes,
                                              ipv6s=then.ipv6s, ipv6_prefixes=then.ipv6_prefixes)
                else:  # a new ENI: its primary addresses alone
                    eni = dataclasses.replace(eni, ips=(eni.primary_ip,), prefixes=(),
                                              ipv6s=eni.ipv6s[:1], ipv6_prefixes=())
            out[eni_id] = eni
        return out
