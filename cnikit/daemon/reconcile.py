"""How much a profile trusts IMDS: start-up, new ENIs and the periodic reconcile.

The strategies a profile (cnikit.daemon.profiles) picks from; the behaviours they model:

vpc-cni-1.18.3  upstream before the fix of issue 3019: per ENI, IMDS is trusted when
                `1 + len(pool) == len(IMDS local-ipv4s)` (lengths only, prefixes: equal
                lengths); otherwise EC2 is asked. IPs seen are added (verified with EC2 only
                when they left the reconcile cooldown), IPs not seen are force-removed from
                the datastore even when a pod holds them. ENIs missing from IMDS are
                force-removed with their pods; start-up and new ENIs take IMDS at face value,
                skipping at start-up an ENI IMDS lists and EC2 no longer has (fixes
                #1011/#1341 of upstream #1008/#1340: IMDS can list a deleted ENI).
vpc-cni-1.18.4  the same with contents compared (upstream's IPsSimilar / PrefixSimilar).
hardened        IMDS is only a hint. Whenever it disagrees with the datastore (and every
                few reconciles anyway) EC2 is asked, and only EC2 can remove an address or
                ENI; an address a pod holds is never removed while the pod exists. An
                address or ENI is added, at start-up too, only when EC2 and IMDS both
                show it (EC2's Describe may lag behind this node's own releases), and
                an address it released not while both still show it. A release EC2
                refuses leaves the addresses quarantined until EC2 and IMDS settle them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from typing import TYPE_CHECKING, Protocol

from cnikit.daemon import ipv6
from cnikit.daemon.apis import ApiError, EniView
from cnikit.daemon.datastore import DatastoreError, host_cidr, row_ip

TAG_NO_MANAGE = "node.k8s.amazonaws.com/no_manage"

if TYPE_CHECKING:
    from cnikit.daemon.ipamd import IpamD

log = logging.getLogger("cnikit.daemon.reconcile")

HARDENED_FULL_CHECK_EVERY = 5  # reconciles between unconditional EC2 checks


class ReconcileStrategy(Protocol):
    """What a profile decides about IMDS: the daemon's public seam for profiles."""

    # Start-up and new ENIs take IMDS's view at face value (upstream), or EC2's (hardened).
    trusts_imds: bool
    # A restart keeps the pods' IP cooldowns the checkpoint carries (upstream forgets them).
    keeps_ip_cooldowns: bool
    # Subnet discovery reads the tag's value ("0" excludes), not only its key.
    subnet_tag_values: bool

    def reconcile(self, d: IpamD, imds_enis: list[EniView]) -> None:
        """One periodic reconcile pass, given IMDS's view of the node's ENIs."""

    def restore_dropped(self, d: IpamD, rows: list[dict]) -> list[dict]:
        """Start-up: checkpointed pods the start-up view did not show; returns those dropped."""

    def confirm_startup(self, d: IpamD) -> None:
        """Start-up, once the checkpoint is restored: what the start-up view alone showed."""

    def release_failed(self, d: IpamD, eni_id: str, cidrs: list[str]) -> None:
        """EC2 refused to release these (datastore keys, already out of the pool)."""

    def startup_enis_ipv6(self, d: IpamD, views: list[EniView]) -> None:
        """IPv6 mode's start-up read of every ENI from IMDS: raise to fail init."""

    def check_imds_read(self, d: IpamD, views: list[EniView]) -> None:
        """An IPv4-mode read of every ENI from IMDS (start-up, reconcile): raise ApiError
        to fail it as the build's own read would."""


class UpstreamReconcile:
    """Upstream's eniIPPoolReconcile: lengths (1.18.3) or contents (1.18.4) compared."""

    trusts_imds = True
    keeps_ip_cooldowns = False
    # An IPv6 pod's IPv4 return route meets a stale one (#3702): upstream before v1.22.4
    # took EEXIST as done.
    egress_replaces_stale_route = False
    # Subnet discovery before v1.22.0 (validTag): the tag's key alone opts a subnet in, so
    # `kubernetes.io/role/cni=0` does too, and the node's own subnet is always used.
    subnet_tag_values = False

    def __init__(self, contents: bool, ipv6_subnet_required: bool = False):
        self.contents = contents
        # v1.20.0-v1.20.4: IPv6 mode needs every ENI's subnet-ipv6-cidr-blocks (#3489).
        self.ipv6_subnet_required = ipv6_subnet_required

    def startup_enis_ipv6(self, d: IpamD, views: list[EniView]) -> None:
        if self.ipv6_subnet_required:
            ipv6.require_ipv6_subnets(d, views)
        else:
            ipv6.tolerate_unmanaged(d, views)

    def check_imds_read(self, d: IpamD, views: list[EniView]) -> None:
        # v1.18.x's getENIMetadata reads every ENI's subnet-ipv4-cidr-block: an ENI of an
        # IPv6-only subnet (404) fails the whole read, and start-up with it (what #3681
        # fixed for later releases).
        for v in views:
            if v.subnet_cidr is None:
                d.metrics.inc("awscni_ipamd_error_count", fn="GetSubnetIPv4CIDRBlock")
                raise ApiError(f"failed to retrieve ENI metadata for ENI: {v.mac}: "
                               "subnet-ipv4-cidr-block: 404", "HTTP404")

    def reconcile(self, d: IpamD, imds_enis: list[EniView]) -> None:
        _upstream(d, imds_enis, contents=self.contents)

    def restore_dropped(self, d: IpamD, rows: list[dict]) -> list[dict]:
        return rows

    def confirm_startup(self, d: IpamD) -> None:
        pass  # IMDS's view is taken as it is (issue 3887)

    def release_failed(self, d: IpamD, eni_id: str, cidrs: list[str]) -> None:
        # Upstream's DeallocCidrs: out of the datastore, into the reconcile cooldown; the
        # reconcile takes back what EC2 still shows once the cooldown is over.
        d.cool([_address(c) for c in cidrs])


class HardenedReconcile:
    """IMDS is a hint; only EC2 takes an address or ENI away."""

    trusts_imds = False
    keeps_ip_cooldowns = True
    egress_replaces_stale_route = True  # the address is the new pod's: its route too
    subnet_tag_values = True  # as EKS documents: "0" excludes a subnet, the node's too

    def reconcile(self, d: IpamD, imds_enis: list[EniView]) -> None:
        _hardened(d, imds_enis)

    def restore_dropped(self, d: IpamD, rows: list[dict]) -> list[dict]:
        return hold_unconfirmed(d, rows)

    def confirm_startup(self, d: IpamD) -> None:
        d.recall_releases()
        drop_unconfirmed(d)

    def release_failed(self, d: IpamD, eni_id: str, cidrs: list[str]) -> None:
        hold_failed_release(d, eni_id, cidrs)

    def startup_enis_ipv6(self, d: IpamD, views: list[EniView]) -> None:
        ipv6.tolerate_unmanaged(d, views)

    def check_imds_read(self, d: IpamD, views: list[EniView]) -> None:
        pass  # IMDS is a hint: an ENI without IPv4 is skipped where it would enter


def trusts_imds(d: IpamD) -> bool:
    return d.cfg.strategy.trusts_imds


def startup_view(d: IpamD) -> list[EniView]:
    if trusts_imds(d):
        # Upstream (1.18.x, with fixes #1011/#1341) takes IMDS's ENIs that EC2 still has.
        listed = d.imds.enis()
        d.cfg.strategy.check_imds_read(d, listed)
        # EC2's tags leave out what the CNI must not manage (upstream's filterUnmanagedENIs).
        return [view for view, truth in skip_departed_enis(d, listed)
                if truth is None or truth.tags.get(TAG_NO_MANAGE) != "true"]
    described = d.ec2.describe_enis(d.instance.instance_id)
    try:
        listed = d.imds.enis()
    except ApiError:
        return described  # IMDS down at start-up: EC2's view alone
    # An ENI IMDS lists that the attachment filter did not: Describe lagging behind an
    # attach (then EC2 by id has it attached here, and both views show it), or one that
    # left EC2 while IMDS still lists it (skipped).
    known = {v.eni_id for v in described}
    mine = d.instance.instance_id
    extra = skip_departed_enis(d, [v for v in listed if v.eni_id not in known])
    return described + [truth for _, truth in extra
                        if truth is not None and truth.instance_id == mine]


def skip_departed_enis(d: IpamD, listed: list[EniView]) -> list[tuple[EniView, EniView | None]]:
    """Each ENI IMDS lists, looked up in EC2 by id: (IMDS's view, EC2's, or None when EC2
    did not answer). One EC2 no longer has (InvalidNetworkInterfaceID.NotFound) is skipped:
    IMDS can go on listing a detached, deleted ENI until the instance's next attach or
    detach (upstream #1008, #1340; AWS: a known IMDS defect, #2497). Before fixes #1011
    and #1341 upstream's start-up aborted on that error, and the daemon crash-looped."""
    out: list[tuple[EniView, EniView | None]] = []
    for view in listed:
        try:
            truth = d.ec2.describe_eni(view.eni_id)
        except ApiError as e:
            log.warning("start: EC2 did not describe %s: %s", view.eni_id, e)
            out.append((view, None))
            continue
        if truth is None:
            d.metrics.inc("awscni_ipamd_error_count", fn="startupDepartedENI")
            d.record_decision("startup-skip-departed-eni", eni=view.eni_id)
            log.warning("start: IMDS lists %s, which EC2 no longer has: skipped", view.eni_id)
            continue
        out.append((view, truth))
    return out


def setup_new_eni(d: IpamD, created: EniView) -> None:
    """A freshly attached ENI enters the datastore."""
    if not trusts_imds(d):
        d.setup_eni(created)
        return
    # Upstream waits for IMDS to show the ENI with its IPs, then uses what IMDS says.
    want = len(created.secondary_ips)
    deadline = d.clock.now() + d.cfg.imds_sync_timeout
    while True:
        try:
            for v in d.imds.enis():
                if v.eni_id == created.eni_id and len(v.secondary_ips) >= want:
                    d.setup_eni(v)
                    return
        except ApiError:
            pass
        if d.clock.now() >= deadline:
            d.metrics.inc("awscni_ipamd_error_count", fn="waitENIAttached")
            log.warning("%s did not show up in IMDS; the reconcile will add it", created.eni_id)
            return
        d.clock.sleep(min(1.0, d.cfg.imds_sync_timeout / 10))


def run(d: IpamD, imds_view=None) -> None:
    try:
        if isinstance(imds_view, ApiError):
            raise imds_view
        imds_enis = d.imds.enis() if imds_view is None else imds_view
        d.cfg.strategy.check_imds_read(d, imds_enis)
    except ApiError as e:
        d.metrics.inc("awscni_ipamd_error_count", fn="reconcileFailedGetENIs")
        log.warning("reconcile: IMDS failed: %s", e)
        return
    if not imds_enis:
        d.metrics.inc("awscni_ipamd_error_count", fn="reconcileFailedGetENIs")
        return
    d.cfg.strategy.reconcile(d, imds_enis)


# ---- upstream (1.18.3 / 1.18.4) -------------------------------------------------------

def _upstream(d: IpamD, imds_enis: list[EniView], contents: bool) -> None:
    current = set(d.ds.enis)
    for view in imds_enis:
        if view.eni_id in d.ds.enis:
            eni = d.ds.enis[view.eni_id]
            if d.cfg.prefix_delegation:
                _prefix_pool(d, view, eni.prefixes(), contents)
            else:
                _ip_pool(d, view, eni.ips(), contents)
            current.discard(view.eni_id)
            continue
        _add_eni(d, view)
    # Sweep: IMDS no longer lists these ENIs, so upstream drops them, pods and all (issue 1967).
    for eni_id in current:
        if d.ds.enis[eni_id].is_primary:
            continue
        evicted = d.ds.remove_eni(eni_id, force=True)
        d.metrics.inc("awscni_reconcile_count", fn="eniReconcileDel")
        if evicted:
            d.metrics.inc("awscni_force_removed_enis")
            d.metrics.inc("awscni_force_removed_ips", len(evicted))
        d.record_decision("reconcile-eni-del", eni=eni_id, evicted=[str(k) for k in evicted])


def _ip_pool(d: IpamD, view: EniView, pool: list[str], contents: bool) -> None:
    attached = view.ips
    need_ec2 = True
    if contents:
        same = set(pool) == set(view.secondary_ips)
    else:
        same = 1 + len(pool) == len(attached)
    if not same:
        try:
            truth = d.ec2.describe_eni(view.eni_id)
        except ApiError:
            log.warning("reconcile: EC2 failed, aborting reconcile of %s", view.eni_id)
            return
        if truth is None:
            return
        attached = truth.ips
        need_ec2 = False
    seen = _verify_and_add(d, view.eni_id, attached, need_ec2, prefixes=False)
    _sweep(d, view.eni_id, [ip for ip in pool if ip not in seen], prefixes=False)


def _prefix_pool(d: IpamD, view: EniView, pool: list[str], contents: bool) -> None:
    attached = view.prefixes
    need_ec2 = True
    same = set(pool) == set(attached) if contents else len(pool) == len(attached)
    if not same:
        try:
            truth = d.ec2.describe_eni(view.eni_id)
        except ApiError:
            return
        if truth is None:
            return
        attached = truth.prefixes
        need_ec2 = False
    seen = _verify_and_add(d, view.eni_id, attached, need_ec2, prefixes=True)
    _sweep(d, view.eni_id, [p for p in pool if p not in seen], prefixes=True)


def _verify_and_add(d: IpamD, eni_id: str, attached: list[str], need_ec2: bool,
                    prefixes: bool) -> set[str]:
    """Upstream verifyAndAddIPsToDatastore: IPs out of the reconcile cooldown are checked
    with EC2 (once per ENI) only while IMDS is the source; the rest is added as found."""
    eni = d.ds.enis[eni_id]
    verified: list[str] | None = None
    seen: set[str] = set()
    for addr in attached:
        if addr == eni.primary_ip:
            continue
        found, cooling = d.recently_freed_state(addr)
        if found:
            if cooling:
                continue
            if need_ec2:
                if verified is None:
                    try:
                        truth = d.ec2.describe_eni(eni_id)
                    except ApiError:
                        seen.add(addr)  # not confirmed either way: leave it alone
                        continue
                    verified = (truth.prefixes if prefixes else truth.ips) if truth else []
                if addr not in verified:
                    continue
            del d.recently_freed[addr]
        try:
            if d.ds.add_cidr(eni_id, addr, prefixes):
                d.metrics.inc("awscni_reconcile_count", fn="eniIPPoolReconcileAdd")
                d.record_decision("reconcile-add", eni=eni_id, address=addr)
        except DatastoreError as e:
            d.metrics.inc("awscni_ipamd_error_count", fn="ipReconcileAdd")
            log.warning("reconcile: cannot add %s to %s: %s", addr, eni_id, e)
            continue
        seen.add(addr)
    return seen


def _sweep(d: IpamD, eni_id: str, gone: list[str], prefixes: bool) -> None:
    for addr in gone:
        cidr = _cidr(addr, prefixes)
        try:
            evicted = d.ds.del_cidr(eni_id, cidr, force=True)
        except DatastoreError:
            d.metrics.inc("awscni_ipamd_error_count", fn="ipReconcileDel")
            continue
        d.metrics.inc("awscni_reconcile_count", fn="eniIPPoolReconcileDel")
        if evicted:
            d.metrics.inc("awscni_force_removed_ips", len(evicted))
        d.record_decision("reconcile-del", eni=eni_id, address=addr, evicted=[str(k) for k in evicted])


# ---- hardened ---------------------------------------------------------------------------

def _hardened(d: IpamD, imds_enis: list[EniView]) -> None:
    if not _imds_agrees(d, imds_enis) or d.reconcile_runs % HARDENED_FULL_CHECK_EVERY == 0:
        try:
            truth = d.ec2.describe_enis(d.instance.instance_id)
        except ApiError as e:
            d.metrics.inc("awscni_ipamd_error_count", fn="reconcileFailedEC2")
            log.warning("reconcile: EC2 failed, changing nothing: %s", e)
            return
        _apply_truth(d, truth, imds_enis)


def _imds_agrees(d: IpamD, imds_enis: list[EniView]) -> bool:
    if d.ds.quarantined:
        return False  # only EC2 settles a quarantined address
    if {v.eni_id for v in imds_enis} != set(d.ds.enis):
        return False
    for v in imds_enis:
        eni = d.ds.enis[v.eni_id]
        if d.cfg.prefix_delegation:
            if set(v.prefixes) != set(eni.prefixes()):
                return False
        elif set(v.secondary_ips) != set(eni.ips()):
            return False
    return True


def _apply_truth(d: IpamD, truth: list[EniView], imds_enis: list[EniView]) -> None:
    """Make the datastore follow EC2's Describe. Taking something away trusts Describe
    alone; adding needs IMDS to show it too, because Describe is eventually consistent: a
    lagging one still shows what this node released, after the reconcile cooldown and
    after EC2 gave it to another node."""
    pd = d.cfg.prefix_delegation
    attached = {v.eni_id: v for v in truth}
    seen = {v.eni_id: set(v.prefixes if pd else v.secondary_ips) for v in imds_enis}
    _settle_releases(d, truth, imds_enis)
    for view in truth:
        if view.eni_id not in d.ds.enis:
            if view.eni_id in seen:
                _add_eni(d, _also_in(view, seen[view.eni_id]))
            continue
        eni = d.ds.enis[view.eni_id]
        want = set(view.prefixes if pd else view.secondary_ips)
        have = set(eni.prefixes() if pd else eni.ips())
        for addr in sorted(want - have):
            if d.recently_freed_state(addr)[1]:
                continue  # EC2 may still be catching up with our own release
            if addr not in seen.get(view.eni_id, ()):
                d.metrics.inc("awscni_ipamd_error_count", fn="reconcileAddUnconfirmed")
                continue  # only Describe shows it: next reconcile, once both agree
            d.ds.quarantined.discard(_cidr(addr, pd))
            try:
                if d.ds.add_cidr(view.eni_id, addr, pd):
                    d.metrics.inc("awscni_reconcile_count", fn="eniIPPoolReconcileAdd")
                    d.record_decision("reconcile-add", eni=view.eni_id, address=addr)
                    _give_back_to_pod(d, addr)
            except DatastoreError as e:
                d.metrics.inc("awscni_ipamd_error_count", fn="ipReconcileAdd")
                log.warning("reconcile: %s", e)
        for addr in sorted(want & have):
            cidr = _cidr(addr, pd)
            if (cidr in d.ds.quarantined and addr in seen.get(view.eni_id, ())
                    and not d.recently_freed_state(addr)[1]):
                d.ds.quarantined.discard(cidr)  # EC2 and IMDS both show it (again): ours
        for addr in sorted(have - want):
            cidr = _cidr(addr, pd)
            c = eni.cidrs[cidr]
            if c.assigned():
                # EC2 took it back while a pod holds it: keep the pod's entry, never hand the
                # address to anyone else, and drop it once the pod is gone.
                d.ds.quarantined.add(cidr)
                d.metrics.inc("awscni_ipamd_error_count", fn="ipLostInEC2")
                d.record_decision("reconcile-held", eni=view.eni_id, address=addr)
                continue
            d.ds.del_cidr(view.eni_id, cidr)
            d.ds.quarantined.discard(cidr)
            d.metrics.inc("awscni_reconcile_count", fn="eniIPPoolReconcileDel")
            d.record_decision("reconcile-del", eni=view.eni_id, address=addr, evicted=[])
    for eni_id in [e for e in d.ds.enis if e not in attached]:
        eni = d.ds.enis[eni_id]
        if eni.is_primary:
            continue
        if eni.assigned_count():
            d.metrics.inc("awscni_ipamd_error_count", fn="eniLostInEC2")
            continue
        d.ds.remove_eni(eni_id)
        d.metrics.inc("awscni_reconcile_count", fn="eniReconcileDel")
        d.record_decision("reconcile-eni-del", eni=eni_id, evicted=[])


def _also_in(view: EniView, shown: set[str]) -> EniView:
    """Describe's view of an ENI narrowed to the addresses IMDS shows too; the reconcile
    adds the others once both show them."""
    return dataclasses.replace(
        view, ips=[a for a in view.ips if a == view.primary_ip or a in shown],
        prefixes=[p for p in view.prefixes if p in shown])


def _settle_releases(d: IpamD, truth: list[EniView], imds_enis: list[EniView]) -> None:
    """The reconcile cooldown of an address this node released restarts while Describe and
    IMDS both still show it: neither has caught up with the release (Describe may lag by
    minutes, IMDS by hours), so their agreement is no evidence that it is ours again. Once
    neither shows it, or the node's own Assign got it back, the release is settled."""
    def shown(views):
        return {a for v in views for a in v.ips + v.prefixes}
    described, listed = shown(truth), shown(imds_enis)
    ours = d.ds.addresses()  # released ones come back only by the node's own Assign
    now = d.clock.now()
    before = dict(d.recently_freed)
    for addr in before:
        if addr in ours:
            del d.recently_freed[addr]
        elif addr in described and addr in listed:
            d.recently_freed[addr] = now
        elif addr not in described and addr not in listed:
            del d.recently_freed[addr]
    if d.recently_freed != before:
        d.save_releases()


def hold_unconfirmed(d: IpamD, rows: list[dict]) -> list[dict]:
    """Hardened start-up: checkpointed pods whose address EC2's Describe did not show.

    Describe may lag behind this node's own assigns (a restart right after one), so a pod's
    address that IMDS shows on a known ENI is kept for the pod, quarantined (never handed
    to another pod, never released) until EC2 and IMDS both show it or EC2 clearly does
    not. A pod's address neither shows (EC2 took it while the pod held it) stays the pod's,
    off every ENI (ds.lost), until the pod's DEL or until EC2 hands it back to one of the
    node's ENIs: the reconcile then gives it back to that pod, never to another. Returns the
    rows still dropped."""
    try:
        views = d.imds.enis()
    except ApiError:
        views = []  # nothing shows them: kept for their pods, off every ENI (below)
    pd = d.cfg.prefix_delegation
    shown = [(ipaddress.ip_network(_cidr(a, pd), strict=False), a, v.eni_id)
             for v in views if v.eni_id in d.ds.enis
             for a in (v.prefixes if pd else v.secondary_ips)]
    held, still = [], []
    for row in rows:
        try:
            ip = ipaddress.ip_address(row_ip(row))
        except (KeyError, TypeError, ValueError):
            still.append(row)
            continue
        where = next(((a, eni_id) for net, a, eni_id in shown if ip in net), None)
        if where is None:
            # No ENI of the node has it now (EC2 took it while the pod held it): the pod
            # still runs, so its address is its own when EC2 hands it back, never free.
            if not pd and str(ip) not in d.ds.lost:
                d.ds.lost[str(ip)] = row
                d.record_decision("restore-lost", ip=str(ip), container=row.get("containerID"))
                continue
            still.append(row)
            continue
        try:
            d.ds.add_cidr(where[1], where[0], pd)
        except DatastoreError:
            still.append(row)
            continue
        d.ds.quarantined.add(_cidr(where[0], pd))
        held.append(row)
    recovered, dropped = d.ds.restore(held)  # rewrites the checkpoint, the lost rows in it
    for row in recovered:
        d.record_decision("restore-held", ip=row_ip(row), container=row.get("containerID"))
    return still + dropped


def _give_back_to_pod(d: IpamD, addr: str) -> None:
    """An address EC2 took from a running pod (held in ds.lost across a restart) is back on
    one of the node's ENIs: it is that pod's again, not free."""
    row = d.ds.lost.pop(addr, None)
    if row is not None:
        recovered, _ = d.ds.restore([row])
        d.record_decision("restore-returned", ip=addr, container=row.get("containerID"),
                 recovered=bool(recovered))


def drop_unconfirmed(d: IpamD) -> None:
    """Hardened start-up: a free address that EC2's Describe shows enters the pool only
    when IMDS shows it too, the rule the reconcile adds by, and an address the node
    released (recalled from before the restart) not even then: a Describe lagging behind
    the releases just before the restart still shows what EC2 took back and may have given
    to another node. The others stay known but quarantined (not handed out, not counted in
    the pool, still taking their slot on the ENI, which EC2 may well count) until the
    reconcile settles them; an empty ENI IMDS does not show goes. Addresses pods hold stay
    (the daemon never releases those)."""
    try:
        views = d.imds.enis()
    except ApiError:
        views = None  # nothing confirms: all quarantined until the reconcile sees both
    seen = {v.eni_id: set(v.prefixes) | set(v.secondary_ips) for v in views or []}
    for eni in list(d.ds.enis.values()):
        if views is not None and eni.eni_id not in seen and not eni.is_primary \
                and not eni.assigned_count():
            d.ds.remove_eni(eni.eni_id)
            d.record_decision("startup-unconfirmed-eni", eni=eni.eni_id)
            continue
        shown = seen.get(eni.eni_id, set())
        for c in eni.cidrs.values():
            addr = _address(c.cidr)
            if c.assigned() or (addr in shown and addr not in d.recently_freed):
                continue
            d.ds.quarantined.add(c.cidr)
            d.metrics.inc("awscni_ipamd_error_count", fn="startupAddUnconfirmed")
            d.record_decision("startup-unconfirmed", eni=eni.eni_id, address=addr)


def hold_failed_release(d: IpamD, eni_id: str, cidrs: list[str]) -> None:
    """Hardened: addresses whose release EC2 refused stay known but quarantined (neither
    handed out nor counted in the pool) until the reconcile sees EC2 and IMDS both show
    them (free again, released on a later pass) or EC2 not show them (gone). Known, so one
    still on the ENI is no leak; quarantined, so one EC2 no longer has goes to no pod."""
    for c in cidrs:
        try:
            d.ds.add_cidr(eni_id, c, d.cfg.prefix_delegation)
        except DatastoreError:
            continue
        d.ds.quarantined.add(c)


def _address(cidr: str) -> str:
    """The wire form of a datastore key: an IP without its /32, a prefix as is."""
    return cidr.removesuffix("/32")


def _cidr(addr: str, prefixes: bool) -> str:
    """The datastore's key for an address: a prefix as is, an IP as its /32."""
    return addr if prefixes else host_cidr(addr)


def _add_eni(d, view) -> None:
    """Take an ENI the datastore does not know yet; a failure is counted, not raised. One
    the daemon is deleting (detaching, still listed by IMDS: upstream #732) is not taken."""
    if view.eni_id in d.leaving():
        return
    try:
        d.setup_eni(view)
        d.metrics.inc("awscni_reconcile_count", fn="eniReconcileAdd")
        d.record_decision("reconcile-eni-add", eni=view.eni_id)
        # A start-up Describe that did not list the ENI lost its pods (ds.lost): their
        # addresses are theirs again, not free.
        for addr in view.secondary_ips:
            _give_back_to_pod(d, addr)
    except DatastoreError as e:
        d.metrics.inc("awscni_ipamd_error_count", fn="eniReconcileAdd")
        log.warning("reconcile: cannot add %s: %s", view.eni_id, e)
