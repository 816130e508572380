"""Upstream aws-node v1.18.4: contents compared, IMDS still trusted for ENIs and restarts."""

from cnikit.daemon.profiles import VIOLATION, Profile
from cnikit.daemon.reconcile import UpstreamReconcile

PROFILE = Profile(
    name="vpc-cni-1.18.4",
    summary="upstream v1.18.4: reconcile compares contents, still trusts IMDS elsewhere",
    reconcile=UpstreamReconcile(contents=True),
    order=20,
    expected={
        # Start-up reads every ENI's subnet-ipv4-cidr-block from IMDS: 404 ends it (#3681).
        "unmanaged-ipv6-only-eni": VIOLATION,
        # Its egress plugin took a stale route's EEXIST as done (#3702, fixed in v1.22.4).
        # The checkpoint carries no cooldowns: a restart reuses a just-freed address.
        "ipv6-restart-after-delete": VIOLATION,
        "ipv6-egress-route-reuse": VIOLATION,
        "imds-missing-eni": VIOLATION,
        "restart-stale-imds": VIOLATION,
        "prefix-partial-read": VIOLATION,
        "describe-lag-churn": VIOLATION,
        "stale-imds-lagging-describe": VIOLATION,
        "ec2-takes-held-address": VIOLATION,
        "ec2-takes-warm-address": VIOLATION,
        "restart-after-delete": VIOLATION,
        "released-address-comes-back": VIOLATION,
        # A released address EC2 hands back to the same ENI within the reconcile cooldown is
        # swept from the datastore under the pod given it (upstream keeps the cooldown
        # entry past the new assign); the storm's churn gets there only now and then.
        "ec2-throttle-storm": None,
        "random-chaos": None,  # depends on what the seed draws
        # The address the scenario waits to see reused went back to EC2 with the warm
        # surplus and came back to the same ENI for the new pod: upstream's reconcile then
        # sweeps it from under that pod inside the reconcile cooldown and gives it to a
        # later pod (released-address-comes-back's bug, not the retries'): on most seeds.
        "runtime-retries": None,
        # validTag takes a subnet tagged kubernetes.io/role/cni=0 (fixed in v1.22.0).
        "subnet-excluded-while-running": VIOLATION,
    },
)
