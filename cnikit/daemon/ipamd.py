"""The daemon's logic (upstream's IPAMContext): start-up, ADD/DEL, the pool manager, the reconcile.

Single-threaded and clock-injected: the process wraps it in one lock and calls `tick()`
every pool interval; unit tests call the same methods with in-memory EC2/IMDS views and
a fake clock. Profiles only differ in how much they trust IMDS (see reconcile.py).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import UTC, datetime

from cnikit.daemon import ipv6, reconcile, subnets, type_limits
from cnikit.daemon.apis import ApiError, Ec2Api, EniView, ImdsApi, InstanceInfo, Limits
from cnikit.daemon.clock import Clock, from_wall_ns, to_wall_ns
from cnikit.daemon.config import Config
from cnikit.daemon.datastore import (
    Assignment,
    Datastore,
    DatastoreError,
    IpamKey,
    NoAvailableIP,
    Stats,
    row_ip,
)
from cnikit.daemon.pool import Capacity, decide, within_targets
from cnikit.daemon.reconcile import TAG_NO_MANAGE

log = logging.getLogger("cnikit.daemon")

TAG_INSTANCE = "node.k8s.amazonaws.com/instance_id"
TAG_CLUSTER = "cluster.k8s.amazonaws.com/name"
TAG_CREATED = "node.k8s.amazonaws.com/createdAt"

# Reconciles between two leaked-ENI sweeps. The sweep is the last resort for an ENI nobody
# knows any more; an ENI the daemon meant to delete is retried every reconcile instead
# (pending_deletes, upstream #732/#754), so the sweep need not run often.
LEAKED_ENI_CHECK_EVERY = 60


class Metrics:
    """Counters with upstream's awscni_* names and labels; gauges are read off the datastore."""

    def __init__(self):
        self.counters: Counter = Counter()  # (name, labels-tuple) -> value
        self.api_latency: dict[str, list[float]] = {}

    def inc(self, name: str, n: float = 1, **labels) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += n

    def get(self, name: str, **labels) -> float:
        return self.counters.get((name, tuple(sorted(labels.items()))), 0)

    def total(self, name: str) -> float:
        return sum(v for (n, _), v in self.counters.items() if n == name)


class InstrumentedEc2:
    """Counts EC2 calls, errors and latency the way upstream's awsutils does."""

    def __init__(self, ec2: Ec2Api, metrics: Metrics):
        self._ec2, self._m = ec2, metrics

    def __getattr__(self, name):
        fn = getattr(self._ec2, name)

        def call(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            except ApiError as e:
                self._m.inc("awscni_aws_api_error_count", api=name, error=e.code)
                raise
            finally:
                ms = (time.perf_counter() - t0) * 1000
                self._m.inc("awscni_aws_api_latency_ms_sum", ms, api=name)
                self._m.inc("awscni_aws_api_latency_ms_count", 1, api=name)

        return call


class IpamD:
    def __init__(self, cfg: Config, ec2: Ec2Api, imds: ImdsApi, clock: Clock, checkpoint=None):
        self.cfg = cfg
        self.metrics = Metrics()
        self.ec2 = InstrumentedEc2(ec2, self.metrics)
        self.imds = imds
        self.clock = clock
        self.ds = Datastore(clock, cfg.ip_cooldown_scaled, checkpoint)
        self.checkpoint = checkpoint
        self.recently_freed: dict[str, float] = {}  # upstream's reconcileCooldownCache
        self.instance: InstanceInfo | None = None
        self.limits: Limits | None = None
        self.capacity: Capacity | None = None
        self.subnet_cidr = ""
        # Each ENI's subnet CIDR, as IMDS or the subnet it was made in shows it: its route
        # table's router (subnet discovery puts ENIs in other subnets than the node's).
        self.eni_cidrs: dict[str, str] = {}
        # EC2's code for the last Assign it refused (subnets.FULL: try elsewhere).
        self.last_refusal: str | None = None
        self.last_reconcile = clock.now()
        self.last_decrease = float("-inf")
        self.reconcile_runs = 0
        # ENIs this daemon detached (or found detaching at start-up) and has not deleted
        # yet: EC2 answers "in use" until a detach completes, which takes seconds (upstream
        # #732, #1399). Retried every reconcile; never taken back into the datastore.
        self.pending_deletes: set[str] = set()
        # Pool steps taken for a CNI ADD (outside the pool manager): an IMDS view read
        # before one is older than the pool and must not be reconciled against it.
        self.add_pool_steps = 0
        self.events: list[dict] = []  # what the daemon decided, for the kit's report and demo

    # ---- start-up (upstream nodeInit) -------------------------------------------------

    def start(self) -> None:
        ident = self.imds.identity()
        self.instance = self.ec2.describe_instance(ident.instance_id)
        # The type as upstream reads it, from IMDS (EC2's when IMDS shows none).
        itype = ident.instance_type or self.instance.instance_type
        self.limits, source = type_limits.instance_limits(self.ec2, itype)
        self.record_decision("instance-limits", instance_type=itype, source=source,
                             max_enis=self.limits.max_enis, ipv4_per_eni=self.limits.ipv4_per_eni)
        max_enis = self.limits.max_enis
        if self.cfg.max_eni:
            max_enis = min(max_enis, self.cfg.max_eni)
        self.capacity = Capacity(max_enis, self.limits.ipv4_per_eni - 1)
        if self.cfg.ipv6:
            self._start_ipv6()
            return
        self.subnet_cidr = self._subnet_cidr()
        enis = reconcile.startup_view(self)
        self.pending_deletes |= self._detaching()
        for view in sorted(enis, key=lambda v: v.device_index or 0):
            if view.eni_id not in self.pending_deletes:
                self.setup_eni(view)
        rows = self.checkpoint.read() if self.checkpoint is not None else []
        if self.cfg.strategy.keeps_ip_cooldowns and self.checkpoint is not None:
            # Before the restore rewrites the checkpoint: without them a restart hands an
            # address freed just before to the next pod at once (upstream 1091's breakage).
            self.ds.recall_cooling(self.checkpoint.read_cooling())
        recovered, dropped = self.ds.restore(rows)
        if dropped:
            dropped = self.cfg.strategy.restore_dropped(self, dropped)
        for row in dropped:
            self.metrics.inc("awscni_ipamd_error_count", fn="restoreDropped")
            self.record_decision("restore-dropped", ip=row_ip(row), container=row.get("containerID"))
        self.cfg.strategy.confirm_startup(self)
        log.info("start: %d ENIs, %d allocations recovered, %d dropped", len(self.ds.enis),
                 len(rows) - len(dropped), len(dropped))
        self.last_reconcile = self.clock.now()
        self.cleanup_leaked_enis()
        # Grow only: upstream's pool manager makes its first pass (the first that can shrink
        # the pool) half an interval after start-up, while the CNI server already answers
        # the pods that waited for it (upstream 3887 goes through that window).
        self.pool_step(shrink=False)

    def _start_ipv6(self) -> None:
        """IPv6 mode (cnikit/daemon/ipv6.py): the /80, then the checkpoint's pods on it."""
        ipv6.start(self)
        rows = self.checkpoint.read() if self.checkpoint is not None else []
        if self.cfg.strategy.keeps_ip_cooldowns and self.checkpoint is not None:
            self.ds.recall_cooling(self.checkpoint.read_cooling())
        _, dropped = self.ds.restore(rows)
        for row in dropped:
            self.metrics.inc("awscni_ipamd_error_count", fn="restoreDropped")
            self.record_decision("restore-dropped", ip=row_ip(row), container=row.get("containerID"))
        self.last_reconcile = self.clock.now()

    def _subnet_cidr(self) -> str:
        """For the plugin's per-ENI route tables (the subnet router is its first host)."""
        try:
            views = [v for v in self.imds.enis() if v.subnet_cidr]
        except ApiError:
            return ""
        self.eni_cidrs.update({v.eni_id: v.subnet_cidr for v in views})
        return views[0].subnet_cidr if views else ""

    def known_subnet_cidr(self) -> str:
        """The subnet CIDR, asking IMDS again if start-up could not read it (IMDS failing
        then): a secondary ENI's route table needs it."""
        if not self.subnet_cidr:
            self.subnet_cidr = self._subnet_cidr()
        return self.subnet_cidr

    def eni_subnet_cidr(self, eni_id: str) -> str:
        """The subnet CIDR of the ENI's route table: its own where known, else the node's."""
        return self.eni_cidrs.get(eni_id) or self.known_subnet_cidr()

    def _is_primary(self, eni_id: str, device: int) -> bool:
        """The instance's primary ENI, never freed: the one EC2 shows holding the instance's
        primary IP, at whatever device index (HyperPod's is at 1: upstream #3753/#3754)."""
        if self.instance is not None and self.instance.primary_eni_id:
            return eni_id == self.instance.primary_eni_id
        return device == 0

    def setup_eni(self, view: EniView) -> None:
        """Add an ENI and the addresses a view shows for it (upstream setupENI)."""
        if view.eni_id in self.ds.enis:
            return
        if view.subnet_cidr is None or (view.instance_id and not view.ips):
            # An ENI of an IPv6-only subnet (IMDS has no IPv4 subnet for it, EC2 no IPv4 on
            # it): no IPv4 pod can live on it.
            self.record_decision("skip-eni-without-ipv4", eni=view.eni_id)
            return
        if view.tags.get(TAG_NO_MANAGE) == "true":  # upstream's filterUnmanagedENIs
            self.record_decision("skip-unmanaged-eni", eni=view.eni_id)
            return
        device = view.device_index if view.device_index is not None else 0
        if view.subnet_cidr:
            self.eni_cidrs[view.eni_id] = view.subnet_cidr
        self.ds.add_eni(view.eni_id, device, self._is_primary(view.eni_id, device),
                        view.primary_ip, view.mac)
        if self.cfg.prefix_delegation:
            for p in view.prefixes:
                self.ds.add_cidr(view.eni_id, p, True)
        for ip in view.secondary_ips:
            if not self.cfg.prefix_delegation:
                self.ds.add_cidr(view.eni_id, ip, False)

    # ---- CNI requests -----------------------------------------------------------------

    def add(self, key: IpamKey, metadata: dict | None = None) -> Assignment:
        self.metrics.inc("awscni_add_ip_req_count")
        try:
            return self.ds.assign(key, metadata)
        except NoAvailableIP:
            # Upstream answers "no available IP" and waits for the pool manager; growing the
            # pool right away saves the runtime a retry round and changes no decision.
            self.add_pool_steps += 1
            self.pool_step()
            try:
                return self.ds.assign(key, metadata)
            except NoAvailableIP:
                self.metrics.inc("awscni_ipamd_error_count", fn="assignPodIPAddress")
                raise

    def delete(self, key: IpamKey) -> Assignment | None:
        gone = self.ds.unassign(key)
        self.metrics.inc("awscni_del_ip_req_count", reason="PodDeleted" if gone else "NotFound")
        return gone

    def check(self, key: IpamKey) -> Assignment | None:
        return self.ds.find(key)

    # ---- periodic work ----------------------------------------------------------------

    def reconcile_due(self) -> bool:
        return self.clock.now() - self.last_reconcile >= self.cfg.reconcile_interval

    def tick(self, imds_view=None) -> None:
        """One pass of upstream's pool manager loop: reconcile when due, then the pool.

        imds_view: IMDS read beforehand (a list of EniView or the ApiError it raised), so a
        process can do the slow read without holding the lock its CNI requests need.
        """
        if self.cfg.ipv6:
            return  # upstream's pool manager returns at once in IPv6 mode: nothing to do
        if self.reconcile_due():
            self.reconcile(imds_view)
        self.pool_step()

    def reconcile(self, imds_view=None) -> None:
        self.reconcile_runs += 1
        self.metrics.inc("awscni_reconcile_count", fn="nodeIPPoolReconcile")
        try:
            reconcile.run(self, imds_view)
        finally:
            self.last_reconcile = self.clock.now()
        self.retry_deletes()
        if self.reconcile_runs % LEAKED_ENI_CHECK_EVERY == 0:
            self.cleanup_leaked_enis()

    def leaving(self) -> set[str]:
        """ENIs on their way out (detached or detaching, not deleted yet): IMDS may still
        list them, and nothing may take them (back) into the datastore."""
        return set(self.pending_deletes)

    def _detaching(self) -> set[str]:
        """This instance's ENIs EC2 shows detaching: a restart in the middle of freeing one
        (upstream #732) must finish the job, not adopt it."""
        try:
            views = self.ec2.describe_enis(self.instance.instance_id)
        except ApiError:
            self.metrics.inc("awscni_ipamd_error_count", fn="describeDetaching")
            return set()
        return {v.eni_id for v in views if v.attachment_status == "detaching"}

    def retry_deletes(self) -> None:
        """Delete the ENIs still pending; one still detaching waits for the next pass."""
        for eni_id in sorted(self.pending_deletes):
            self._delete_pending(eni_id)

    def _delete_pending(self, eni_id: str) -> bool:
        try:
            view = self.ec2.describe_eni(eni_id)
            if view is None:
                self.pending_deletes.discard(eni_id)
                return True
            if view.attachment_id and view.attachment_status != "detaching":
                self.ec2.detach_eni(view.attachment_id)
            self.ec2.delete_eni(eni_id)
        except ApiError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="deletePendingENI")
            log.info("ENI %s not deleted yet (%s): retried next reconcile", eni_id, e)
            return False
        self.pending_deletes.discard(eni_id)
        self.record_decision("eni-freed", eni=eni_id)
        return True

    def cleanup_leaked_enis(self) -> None:
        """Delete ENIs tagged for this instance that are attached nowhere: what a failed
        attach-then-delete leaves behind (upstream's cleanUpLeakedENIs). EC2 decides."""
        try:
            tagged = self.ec2.describe_tagged_enis(TAG_INSTANCE, self.instance.instance_id)
        except ApiError:
            self.metrics.inc("awscni_ipamd_error_count", fn="cleanUpLeakedENIs")
            return
        for view in tagged:
            if view.attachment_id or view.instance_id or view.eni_id in self.ds.enis:
                continue
            try:
                self.ec2.delete_eni(view.eni_id)
                self.record_decision("eni-leak-deleted", eni=view.eni_id)
            except ApiError:
                self.metrics.inc("awscni_ipamd_error_count", fn="cleanUpLeakedENIs")

    def pool_step(self, shrink: bool = True) -> None:
        d = self.decision()
        if d.short > 0:
            self._increase(d.short)
        elif shrink and (d.over > 0 or d.free_enis) and (
                self.clock.now() - self.last_decrease >= self.cfg.decrease_interval):
            self._decrease(d)

    def decision(self):
        return decide(self.cfg, self.ds.stats(), self.capacity, len(self.ds.free_cidrs(True)))

    def within_targets(self) -> bool:
        return within_targets(self.cfg, self.ds.stats(), self.capacity, len(self.ds.free_cidrs(True)))

    # ---- growing the pool -------------------------------------------------------------

    def _increase(self, short: int) -> None:
        pd = self.cfg.prefix_delegation
        slots = self.capacity.slots_per_eni
        eni_mode = not pd and not self.cfg.warm_target_defined
        need = short
        for eni in sorted(self.ds.enis.values(), key=lambda e: e.device_number):
            if need <= 0:
                return
            used = len(eni.prefixes()) if pd else len(eni.ips())
            # A slot on every ENI for each address EC2 took from a pod across a restart
            # (ds.lost): EC2 hands it back to the ENI it came from, which no view names now.
            room = slots - used - len(self.ds.lost)
            if room <= 0:
                continue
            # WARM_ENI_TARGET fills an ENI whole, like upstream's tryAssignIPs.
            want = room if eni_mode else min(room, need)
            got = self._assign_on(eni.eni_id, want)
            need -= got
            if got == 0 and not (self.cfg.subnet_discovery and self.last_refusal in subnets.FULL):
                return  # EC2 refused: try again next tick rather than hammer it
        if need > 0:
            if len(self.ds.enis) >= self.capacity.max_enis:
                self.metrics.inc("awscni_ipamd_error_count", fn="increaseIPPoolMaxENI")
                return
            count = slots if eni_mode else min(need, slots)
            self._allocate_eni(count)

    def _assign_on(self, eni_id: str, count: int) -> int:
        self.last_refusal = None
        try:
            if self.cfg.prefix_delegation:
                got = self.ec2.assign_prefixes(eni_id, count)
            else:
                got = self.ec2.assign_ips(eni_id, count)
        except ApiError as e:
            self.last_refusal = e.code
            self.metrics.inc("awscni_ipamd_error_count", fn="increaseIPPool")
            log.warning("assign %d on %s failed: %s", count, eni_id, e)
            return 0
        for c in got:
            try:
                self.ds.add_cidr(eni_id, c, self.cfg.prefix_delegation)
            except DatastoreError as e:
                log.warning("adding %s to %s: %s", c, eni_id, e)
        if self.recently_freed.keys() & set(got):
            self.save_releases()  # EC2 gave back what this node released: ours again
        self.record_decision("assign", eni=eni_id, addresses=got)
        return len(got)

    def next_device_index(self, attached: list[EniView]) -> int:
        used = {e.device_number for e in self.ds.enis.values()}
        used |= {v.device_index for v in attached if v.device_index is not None}
        i = 1
        while i in used:
            i += 1
        return i

    def _allocate_eni(self, count: int) -> str | None:
        """Create, tag, attach at the next free device index; roll back on failure."""
        inst = self.instance
        try:
            attached = self.ec2.describe_enis(inst.instance_id)
            index = self.next_device_index(attached)
            if index >= self.capacity.max_enis:
                self.metrics.inc("awscni_ipamd_error_count", fn="increaseIPPoolMaxENI")
                return None
            tags = {TAG_INSTANCE: inst.instance_id, TAG_CLUSTER: self.cfg.cluster_name,
                    TAG_CREATED: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            secondary = 0 if self.cfg.prefix_delegation else count
            view = self._create_eni(tags, secondary)
        except ApiError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="increaseIPPoolAllocENI")
            log.warning("create ENI failed: %s", e)
            return None
        try:
            view.attachment_id = self.ec2.attach_eni(view.eni_id, inst.instance_id, index)
        except ApiError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="increaseIPPoolAttachENI")
            log.warning("attach %s at %d failed: %s; deleting it", view.eni_id, index, e)
            self.pending_deletes.add(view.eni_id)
            self._delete_pending(view.eni_id)
            return None
        view.device_index = index
        self.record_decision("eni-attached", eni=view.eni_id, device=index)
        reconcile.setup_new_eni(self, view)
        if self.cfg.prefix_delegation and view.eni_id in self.ds.enis:
            self._assign_on(view.eni_id, count)
        return view.eni_id

    def _create_eni(self, tags: dict[str, str], secondary: int) -> EniView:
        """A new ENI in the first subnet EC2 makes it in (cnikit/daemon/subnets.py); the
        last refusal is raised when none does."""
        inst = self.instance
        tried = subnets.candidates(self)
        if not tried:
            self.record_decision("no-usable-subnet")
            raise ApiError("no valid subnets available for ENI creation: every subnet is "
                           "untagged or tagged kubernetes.io/role/cni=0", "NoUsableSubnet")
        refused: ApiError | None = None
        for subnet_id, cidr in tried:
            try:
                view = self.ec2.create_eni(subnet_id, inst.security_groups, tags, secondary)
            except ApiError as e:
                refused = e
                continue
            if cidr:
                self.eni_cidrs[view.eni_id] = cidr
            return view
        raise refused

    # ---- shrinking the pool -----------------------------------------------------------

    def _decrease(self, d) -> None:
        self.last_decrease = self.clock.now()
        pd = self.cfg.prefix_delegation
        if d.over > 0:
            by_eni: dict[str, list[str]] = {}
            for eni_id, cidr in self.ds.free_cidrs(pd)[: d.over]:
                by_eni.setdefault(eni_id, []).append(cidr)
            for eni_id, cidrs in by_eni.items():
                self._release(eni_id, cidrs)
        if d.free_enis or d.over > 0:
            self._free_one_eni(need_check=not d.free_enis)

    def _release(self, eni_id: str, cidrs: list[str]) -> None:
        pd = self.cfg.prefix_delegation
        # Out of the datastore first, so no pod can be given an address being released.
        for c in cidrs:
            self.ds.del_cidr(eni_id, c)
        wire = cidrs if pd else [c.split("/")[0] for c in cidrs]
        try:
            if pd:
                self.ec2.unassign_prefixes(eni_id, wire)
            else:
                self.ec2.unassign_ips(eni_id, wire)
        except ApiError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="decreaseIPPool")
            log.warning("release %s on %s failed: %s", wire, eni_id, e)
            self.record_decision("release-failed", eni=eni_id, addresses=wire, error=e.code)
            # Never back into the pool as free: EC2 may have refused because they are no
            # longer on the ENI (then they may be another node's). The profile decides.
            self.cfg.strategy.release_failed(self, eni_id, cidrs)
            return
        self.cool(wire)
        self.record_decision("release", eni=eni_id, addresses=wire)

    def cool(self, addresses: list[str]) -> None:
        """Into the reconcile cooldown: a lagging Describe still shows them for a while."""
        now = self.clock.now()
        for a in addresses:
            self.recently_freed[a] = now
        self.save_releases()

    def save_releases(self) -> None:
        """The reconcile cooldowns of addresses not in the pool (again), beside the
        checkpoint, for a profile that recalls them after a restart; a failed write is
        counted, not raised: they are a hint."""
        write = getattr(self.checkpoint, "write_released", None)
        if write is None:
            return
        ours = self.ds.addresses()
        try:
            write({a: to_wall_ns(self.clock, t) for a, t in self.recently_freed.items()
                   if a not in ours})
        except OSError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="saveReleases")
            log.warning("saving the recent releases failed: %s", e)

    def recall_releases(self) -> None:
        """The reconcile cooldowns a previous process of this daemon saved."""
        read = getattr(self.checkpoint, "read_released", None)
        if read is None:
            return
        for a, ns in read().items():
            self.recently_freed.setdefault(a, from_wall_ns(self.clock, ns))

    def _free_one_eni(self, need_check: bool) -> None:
        for eni_id in self.ds.deletable_enis(self.cfg.min_eni_lifetime):
            eni = self.ds.enis[eni_id]
            if need_check:
                # Warm-IP mode: only when the pool stays at its targets without this ENI.
                size = sum(c.size for c in eni.cidrs.values())
                s = self.ds.stats()
                after = Stats(s.total - size, s.assigned, s.cooldown, s.prefixes, s.enis - 1)
                if decide(self.cfg, after, self.capacity, 0).short > 0:
                    continue
            self.free_eni(eni_id)
            return

    def free_eni(self, eni_id: str) -> bool:
        """Detach and delete an ENI nobody uses (upstream freeENI)."""
        eni = self.ds.enis.get(eni_id)
        if eni is None or eni.is_primary:
            return False
        self.ds.remove_eni(eni_id)
        self.pending_deletes.add(eni_id)
        try:
            view = self.ec2.describe_eni(eni_id)
            if view is not None and view.attachment_id:
                self.ec2.detach_eni(view.attachment_id)
        except ApiError as e:
            self.metrics.inc("awscni_ipamd_error_count", fn="freeENI")
            log.warning("free ENI %s failed: %s (retried every reconcile)", eni_id, e)
            return False
        return self._delete_pending(eni_id)

    # ---- bookkeeping ------------------------------------------------------------------

    def recently_freed_state(self, addr: str) -> tuple[bool, bool]:
        """(found, still cooling) like upstream's reconcileCooldownCache.RecentlyFreed."""
        t = self.recently_freed.get(addr)
        if t is None:
            return False, False
        return True, self.clock.now() - t < self.cfg.reconcile_cooldown

    def record_decision(self, kind: str, **fields) -> None:
        """One entry of the daemon's decision log (its last 500, in its status answer); the
        reconcile strategies and the IPv6 start-up write to it too."""
        self.events.append({"t": self.clock.now(), "kind": kind, **fields})
        del self.events[:-500]
