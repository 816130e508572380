"""Upstream aws-node v1.20.4, modelled in its IPv6 mode: init fails on an ENI without
`subnet-ipv6-cidr-blocks` in IMDS (#3489, fixed in v1.20.5)."""

from cnikit.daemon.profiles import VIOLATION, Profile
from cnikit.daemon.reconcile import UpstreamReconcile

PROFILE = Profile(
    name="vpc-cni-1.20.4",
    summary="upstream v1.20.4 in IPv6 mode: an unmanaged IPv4-only ENI ends ipamd's init",
    # Its IPv4 reconcile compares contents, as 1.18.4's; only its IPv6 mode is modelled.
    reconcile=UpstreamReconcile(contents=True, ipv6_subnet_required=True),
    order=25,
    families=("ipv6",),
    expected={
        "ipv6-unmanaged-ipv4-eni": VIOLATION,
        # The checkpoint carries no cooldowns: a restart reuses a just-freed address.
        "ipv6-restart-after-delete": VIOLATION,
        "ipv6-egress-route-reuse": VIOLATION,  # #3702, fixed in v1.22.4
    },
)
