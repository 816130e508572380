"""The kit's own: never frees an IP or ENI on IMDS evidence alone."""

from cnikit.daemon.profiles import Profile
from cnikit.daemon.reconcile import HardenedReconcile

PROFILE = Profile(
    name="hardened",
    summary="cnikit's: IMDS is a hint, only EC2 takes an address or ENI away",
    reconcile=HardenedReconcile(),
    order=30,
    expected={},  # holds everywhere
)
