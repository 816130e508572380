"""Follows EC2 through its public API and keeps timestamped snapshots (needed for `lag`).

A thread polls DescribeNetworkInterfaces every `interval` (50 ms by default): IPs,
prefixes and attachments change there. Another thread runs DescribeInstances (live states
only) for an instance an ENI names that is not known yet, and for all instances every 5 s
(type, state, termination): instances rarely change, and on moto that call grows slow
with every instance ever launched, so it must not delay the ENIs. Subnets and VPCs are
fetched when a new id appears, and every 5 s. While the gate's feed (below) counts the
writes that may change instances, subnets or VPCs, those two refreshes follow that count
instead, and run every minute besides.

Only changes are stored: a snapshot is valid from its `t` until the next one's.

When the endpoint is the cnikit gate, a second thread long-polls its ownership version
(`GET /_cnikit/owners?since=V&wait=S`) and wakes the poller at once on a change, so EC2
changes show up in about one Describe round trip instead of up to one interval later;
while that feed answers, the periodic poll slows to once a second (a safety net).
Any other endpoint (no such path) simply keeps the periodic poll.

When the endpoint is a gate in this process, its change counter (faultcore.freshness) is
read before each poll, and `on_polled(count)` reports, after the poll's state went to
`on_change`, that the view now holds EC2 as of at least that count: the server waits on it.

Regions: EC2 keeps each region apart, so the view polls every region it follows and merges
them (ids are unique across regions). It follows its own `region`, plus every region the
gate says it serves (the feed's `regions`), so an instance launched by a client signing for
any region shows up. Every instance, ENI and subnet in the view carries `"Region"`, the
region whose API returned it; an instance's `Placement` has its `AvailabilityZone` and
`AvailabilityZoneId` (taken from its subnet when the upstream leaves it out, as moto does).
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from fault_imds.tree import LIVE_STATES, Ec2State, eni_key, slim_eni
from faultcore import freshness
from faultcore.caller import CALLER_HEADER

log = logging.getLogger("fault_imds.ec2")

INSTANCE_REFRESH_S = 5.0
MAX_SNAPSHOTS = 20_000
# While the gate's change feed is live it wakes the poller on every change; the periodic
# poll is a safety net only. Every second, it was half of a quiet IMDS's CPU and a fifth
# of moto's (bench/bench_cpu.py --idle).
FEED_POLL_S = 5.0
INSTANCE_FIELDS = (
    "InstanceId",
    "InstanceType",
    "ImageId",
    "State",
    "Placement",
    "PrivateIpAddress",
    "PrivateDnsName",
    "SecurityGroups",
    "OwnerId",
    "ReservationId",
    "Architecture",
    "LaunchTime",
    "AmiLaunchIndex",
    "IamInstanceProfile",
    "SubnetId",
)
NETWORK_REFRESH_S = 5.0
# While the gate's feed counts the writes that may change instances, subnets or VPCs
# ("world"), those are refreshed when the count moves, and otherwise this seldom (a safety
# net): every 5 s, DescribeInstances (16 ms of moto's CPU with six instances), DescribeSubnets
# and DescribeVpcs were a third of an idle cluster's IMDS and moto CPU.
WORLD_REFRESH_S = 60.0


def _mark_caller(request, **_kw) -> None:
    """Sent with every call: the gate spares the IMDS the EC2 API's faults (faultcore.caller)."""
    request.headers[CALLER_HEADER[0]] = CALLER_HEADER[1]


_session: boto3.session.Session | None = None
_session_lock = threading.Lock()


def ec2_client(endpoint: str, region: str = "us-east-1"):
    """A boto3 EC2 client for the kit's EC2 (dummy credentials: the endpoint is local).

    From one session per process: a new session parses EC2's service model again (about
    0.2 s of CPU, for each of a view's clients, in every run of a test process)."""
    global _session
    with _session_lock:  # a session is not thread-safe; the clients it makes are
        if _session is None:
            _session = boto3.session.Session()
        client = _session.client(
            "ec2",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=2,
                          read_timeout=10),
        )
    client.meta.events.register("before-sign.ec2.*", _mark_caller)
    return client


class Ec2View:
    def __init__(
        self,
        endpoint: str,
        region: str = "us-east-1",
        interval: float = 0.05,
        history_s: float = 900.0,
        on_change: Callable[[Ec2State], None] | None = None,
        on_polled: Callable[[int], None] | None = None,
    ):
        self.endpoint = endpoint
        self.region = region
        self.regions: tuple[str, ...] = (region,)  # followed: our own, then the gate's others
        self.interval = interval
        self.history_s = history_s
        self.on_change = on_change
        self.on_polled = on_polled
        self.counter = freshness.counter_for(endpoint)  # None: EC2 is not in this process
        self.last_error: str | None = None
        self.polls = 0
        self.feed_live = False  # the gate's change feed answers: it wakes the poller
        self.world: int | None = None  # the feed's count of instance/subnet/VPC writes
        self._force_full = False  # that count moved: a full instance refresh is due
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._history: list[Ec2State] = []
        self._times: list[float] = []
        self._first = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._inst_thread: threading.Thread | None = None
        self._instances: dict[str, dict[str, Any]] = {}
        self._attached: dict[str, str] = {}  # instance id -> region
        self._absent: set[str] = set()  # attached to instances that are gone (moto keeps those)
        self._inst_wake = threading.Event()
        self._subnets: dict[str, dict[str, Any]] = {}
        self._zone_ids: dict[str, dict[str, Any]] = {}  # subnets asked for outside a refresh
        self._vpcs: dict[str, dict[str, Any]] = {}
        self._network_at = float("-inf")
        self._last_key: tuple | None = None
        self._enis: dict[tuple, dict[str, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Ec2View:
        self._thread = threading.Thread(target=self._run, name="fault-imds-ec2", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch_gate, name="fault-imds-gate", daemon=True).start()
        self._inst_thread = threading.Thread(
            target=self._run_instances, name="fault-imds-ec2-instances", daemon=True
        )
        self._inst_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._inst_wake.set()
        self._first.set()  # release the instance thread if EC2 never answered
        if self._thread:
            self._thread.join(timeout=15)
        if self._inst_thread:
            self._inst_thread.join(timeout=15)

    def wait_first(self, timeout: float) -> bool:
        """True once one observation has succeeded."""
        return self._first.wait(timeout)

    def poke(self) -> None:
        """Poll now instead of at the next tick."""
        self._wake.set()

    # -- reading -----------------------------------------------------------------------------

    def latest(self) -> Ec2State | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def snapshots(self) -> list[Ec2State]:
        """Every state kept (oldest first): what `lag` may serve, and what tells a target
        that left EC2 from one it never had."""
        with self._lock:
            return list(self._history)

    def at(self, t: float) -> Ec2State | None:
        """EC2 as observed at monotonic time t (the earliest snapshot if t is before it)."""
        with self._lock:
            if not self._history:
                return None
            i = bisect.bisect_right(self._times, t) - 1
            return self._history[max(i, 0)]

    # -- the gate's change feed (optional) -----------------------------------------------------

    def _watch_gate(self) -> None:
        version = None
        base = self.endpoint.rstrip("/") + "/_cnikit/owners"
        while not self._stop.is_set():
            url = base if version is None else f"{base}?since={version}&wait=2"
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    data = json.loads(resp.read())
            except (urllib.error.HTTPError, ValueError):
                self.feed_live = False
                return  # not the gate: the periodic poll is all there is
            except OSError:
                self.feed_live = False
                self._stop.wait(0.5)
                continue
            if not isinstance(data, dict) or "version" not in data:
                self.feed_live = False
                return
            self._follow(data.get("regions") or ())
            world = data.get("world")
            if isinstance(world, int) and self.world is not None and world != self.world:
                self._network_at = float("-inf")
                self._force_full = True
                self._inst_wake.set()
                self.poke()
            if version is not None and data["version"] != version:
                self.poke()
            version = data["version"]
            self.world = world if isinstance(world, int) else None
            self.feed_live = True

    def _follow(self, regions) -> None:
        """Also follow the regions the gate serves (it learns them from signed requests)."""
        new = tuple(r for r in regions if isinstance(r, str) and r not in self.regions)
        if new:
            self.regions += new
            self._network_at = float("-inf")  # their subnets and VPCs too
            self._inst_wake.set()  # and their instances, in a full refresh
            self.poke()

    def _refresh_s(self, period: float) -> float:
        """How often instances, subnets and VPCs are read again: seldom while the feed says
        when they may have changed."""
        return WORLD_REFRESH_S if self.feed_live and self.world is not None else period

    # -- polling -----------------------------------------------------------------------------

    @staticmethod
    def _client_for(clients: dict[str, Any], endpoint: str, region: str):
        client = clients.get(region)
        if client is None:
            client = clients[region] = ec2_client(endpoint, region)
        return client

    def _run(self) -> None:
        backoff = self.interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._poll_once()
                self.last_error = None
                backoff = self.interval
                self._first.set()
            except Exception as e:  # EC2 down or restarting: keep serving the last view
                msg = f"{type(e).__name__}: {e}".splitlines()[0]
                if msg != self.last_error:
                    log.warning("EC2 poll failed: %s", msg)
                self.last_error = msg
                backoff = min(backoff * 2, 2.0)
            # While the gate's feed wakes us on every change, the periodic poll is only a
            # safety net: polling less leaves the GIL to the IMDS (moto often shares it).
            interval = FEED_POLL_S if self.feed_live else self.interval
            wait = (interval if self.last_error is None else backoff) - (time.monotonic() - started)
            if wait > 0:
                self._wake.wait(wait)
            self._wake.clear()

    def _poll_once(self) -> None:
        # Read first: the Describe answers below hold every change counted so far.
        count = self.counter() if self.counter is not None else None
        self._read_ec2()
        if count is not None and self.on_polled:
            self.on_polled(count)

    def _read_ec2(self) -> None:
        regions = self.regions
        raw: list[tuple[str, dict[str, Any]]] = []
        for region in regions:
            c = self._client_for(self._clients, self.endpoint, region)
            for page in c.get_paginator("describe_network_interfaces").paginate():
                raw.extend((region, e) for e in page.get("NetworkInterfaces", []))
        observed = time.monotonic()
        # Snapshots share unchanged ENIs with the previous one: history grows with changes.
        known, self._enis = self._enis, {}
        enis: list[dict[str, Any]] = []
        for region, e in raw:
            k = (region, *eni_key(e))
            slim = known.get(k)
            if slim is None:
                slim = slim_eni(e)
                slim["Region"] = region
            enis.append(slim)
            self._enis[k] = slim
        wall = time.time()
        subnet_ids = {e.get("SubnetId") for e in enis} - {None, ""}
        vpc_ids = {e.get("VpcId") for e in enis} - {None, ""}
        stale = observed - self._network_at > self._refresh_s(NETWORK_REFRESH_S)
        if stale or subnet_ids - self._subnets.keys() or vpc_ids - self._vpcs.keys():
            # Before instances: an instance's AvailabilityZoneId comes from its subnet.
            self._subnets, self._vpcs = self._describe_network(regions)
            self._network_at = time.monotonic()
        attached = {
            (e.get("Attachment") or {}).get("InstanceId"): e["Region"] for e in enis
        }
        attached.pop(None, None)
        self._attached = attached
        if not self._first.is_set():
            self._instances = self._describe_instances(self._clients, regions)
            self._absent = attached.keys() - self._instances.keys()
        elif attached.keys() - self._instances.keys() - self._absent:
            self._inst_wake.set()  # a new instance: described in the other thread
        state = Ec2State(
            t=observed,
            wall=wall,
            instances=dict(self._instances),
            enis=tuple(enis),
            subnets=self._subnets,
            vpcs=self._vpcs,
            region=self.region,
        )
        self.polls += 1
        key = state.key()
        if key == self._last_key:
            return
        self._last_key = key
        with self._lock:
            self._history.append(state)
            self._times.append(observed)
            # Keep what `lag` may still ask for: everything newer than history_s, plus the
            # snapshot that was current at that horizon.
            horizon = observed - self.history_s
            cut = max(
                bisect.bisect_right(self._times, horizon) - 1, len(self._history) - MAX_SNAPSHOTS
            )
            if cut > 0:
                del self._history[:cut]
                del self._times[:cut]
        if self.on_change:
            self.on_change(state)

    def _run_instances(self) -> None:
        """DescribeInstances is slow on moto (it grows with every instance ever launched, and
        moto usually shares this process): it runs here, so it never delays following the
        ENIs; a new instance is described alone, all of them only every few seconds."""
        clients: dict[str, Any] = {}
        self._first.wait()
        full_at = time.monotonic()
        while not self._stop.is_set():
            refresh = self._refresh_s(INSTANCE_REFRESH_S)
            self._inst_wake.wait(max(0.0, full_at + refresh - time.monotonic()))
            self._inst_wake.clear()
            if self._stop.is_set():
                return
            attached = self._attached
            new = {i: attached[i] for i in attached.keys() - self._instances.keys() - self._absent}
            forced, self._force_full = self._force_full, False
            full = forced or time.monotonic() >= full_at + refresh or not new
            try:
                if full:
                    instances = self._describe_instances(clients, self.regions)
                    full_at = time.monotonic()
                else:
                    instances = {**self._instances,
                                 **self._describe_instances(clients, self.regions, new)}
            except Exception as e:  # keep the last known instances
                log.warning(
                    "DescribeInstances failed: %s", f"{type(e).__name__}: {e}".splitlines()[0]
                )
                full_at = time.monotonic() - refresh + 0.5  # a full one soon
                self._stop.wait(0.5)
                continue
            gone = attached.keys() - instances.keys()
            self._absent = gone if full else self._absent | gone
            if instances != self._instances:
                self._instances = instances
                self.poke()

    def _describe_network(self, regions) -> tuple[dict, dict]:
        subnets: dict[str, dict[str, Any]] = {}
        vpcs: dict[str, dict[str, Any]] = {}
        for region in regions:
            c = self._client_for(self._clients, self.endpoint, region)
            for s in c.describe_subnets().get("Subnets", []):
                subnets[s["SubnetId"]] = {**s, "Region": region}
            for v in c.describe_vpcs().get("Vpcs", []):
                vpcs[v["VpcId"]] = {**v, "Region": region}
        return subnets, vpcs

    def _describe_instances(
        self, clients: dict[str, Any], regions, ids: dict[str, str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Live instances of every region (`ids`: only these, instance id -> region)."""
        out: dict[str, dict[str, Any]] = {}
        for region in regions:
            wanted = None if ids is None else sorted(i for i, r in ids.items() if r == region)
            if wanted == []:
                continue
            live = [{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
            if wanted:
                live.append({"Name": "instance-id", "Values": wanted})
            client = self._client_for(clients, self.endpoint, region)
            for page in client.get_paginator("describe_instances").paginate(Filters=live):
                for res in page.get("Reservations", []):
                    for inst in res.get("Instances", []):
                        d = self._instance(inst, res, region, client)
                        prev = self._instances.get(inst["InstanceId"])
                        # Unchanged instances stay the same object, shared by the snapshots.
                        out[inst["InstanceId"]] = prev if prev == d else d
        return out

    def _instance(self, inst: dict, res: dict, region: str, client) -> dict[str, Any]:
        d = {k: inst[k] for k in INSTANCE_FIELDS if k in inst}
        d.setdefault("OwnerId", res.get("OwnerId", ""))
        d.setdefault("ReservationId", res.get("ReservationId", ""))
        d["Region"] = region
        placement = dict(d.get("Placement") or {})
        if not placement.get("AvailabilityZoneId") and d.get("SubnetId"):
            zone_id = self._zone_id(client, d["SubnetId"])
            if zone_id:
                placement["AvailabilityZoneId"] = zone_id
        d["Placement"] = placement
        return d

    def _zone_id(self, client, subnet_id: str) -> str | None:
        """The AZ id of a subnet: from the last network refresh, else asked once (a subnet
        of a region just followed may not be in it yet)."""
        known = self._subnets.get(subnet_id) or self._zone_ids.get(subnet_id)
        if known is None:
            try:
                found = client.describe_subnets(SubnetIds=[subnet_id]).get("Subnets", [])
            except ClientError:  # gone already: the instance is going too
                found = []
            known = self._zone_ids[subnet_id] = found[0] if found else {}
        return known.get("AvailabilityZoneId")
