"""The daemon's IPv6 mode, as upstream's ipamd runs it (ENABLE_IPv6=true, ENABLE_IPv4=false,
prefix delegation required):

- start-up: the primary ENI's /80 as EC2 describes it (`Ipv6Prefixes`), one assigned
  (AssignIpv6Addresses, Ipv6PrefixCount=1) when it has none; with several, the first. IMDS's
  `ipv6-prefix` is read but never fed to the datastore (upstream's setupENI only logs it);
- no pool manager, no reconcile, no secondary ENIs, no leaked-ENI sweep, WARM_* ignored:
  the /80 is never released;
- a pod's address: a released one out of its cooldown first, else the next one up from
  the prefix's base (the first pod gets `<prefix>::` itself), as upstream's getUnusedIP.

How a profile reads the node's ENIs from IMDS at start-up decides upstream #3489: v1.20.x
fails init when an ENI has no `subnet-ipv6-cidr-blocks` (an unmanaged IPv4-only ENI),
v1.18.x and hardened do not (`ReconcileStrategy.startup_enis_ipv6`).
"""

from __future__ import annotations

import logging

from cnikit.daemon.apis import ApiError, EniView

log = logging.getLogger("cnikit.daemon")


def start(d) -> None:
    """Upstream nodeInit in IPv6 mode: the primary ENI and its /80 into the datastore."""
    inst = d.instance
    views = d.imds.enis(ipv6=True)  # upstream's DescribeAllENIs: an error here ends init
    d.cfg.strategy.startup_enis_ipv6(d, views)
    primary = d.ec2.describe_eni(inst.primary_eni_id)
    if primary is None:
        raise ApiError(f"the primary ENI {inst.primary_eni_id} is not in EC2", "NotFound")
    prefixes = list(primary.ipv6_prefixes)
    if not prefixes:
        prefixes = d.ec2.assign_ipv6_prefixes(primary.eni_id, 1)
        d.record_decision("assign", eni=primary.eni_id, addresses=prefixes)
    if not d.ds.enis.get(primary.eni_id):
        d.ds.add_eni(primary.eni_id, 0, True, primary.primary_ip, primary.mac)
    # Several /80s (someone else's doing): the first serves, the rest are left as they are.
    d.ds.add_cidr(primary.eni_id, prefixes[0], True)
    log.info("start (IPv6): %s holds %s", primary.eni_id, prefixes[0])


def tolerate_unmanaged(d, views: list[EniView]) -> None:
    """What v1.18.x and a correct build do: an ENI without IPv6 information (an unmanaged
    ENI of an IPv4-only subnet) is skipped, the primary ENI is all IPv6 mode uses."""
    for v in views:
        if v.device_index and v.subnet_ipv6_cidr is None:
            d.record_decision("startup-skip-ipv4-only-eni", eni=v.eni_id)


def require_ipv6_subnets(d, views: list[EniView]) -> None:
    """v1.20.0-v1.20.4's getENIMetadata in IPv6 mode: a 404 on an ENI's
    subnet-ipv6-cidr-blocks fails the whole read, and ipamd's init with it (upstream
    #3489, fixed in v1.20.5)."""
    for v in views:
        if v.subnet_ipv6_cidr is None:
            d.metrics.inc("awscni_ipamd_error_count", fn="GetSubnetIPv6CIDRBlocks")
            raise ApiError(f"ipamd init: failed to retrieve attached ENIs info: failed to "
                           f"retrieve ENI metadata for ENI: {v.mac}", "HTTP404")
