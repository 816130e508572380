"""Daemon configuration from upstream's environment variables.

Names and defaults are aws/amazon-vpc-cni-k8s's; every interval is multiplied by
CNIKIT_TIME_SCALE so a test can run the same logic ten times faster.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from cnikit.daemon import profiles
from cnikit.errors import UsageError
from cnikit.runtime import time_scale

DEFAULT_PROFILE = profiles.DEFAULT

# Upstream's fixed intervals (seconds, before scaling).
POOL_INTERVAL = 5.0  # ipamd's pool manager loop
RECONCILE_INTERVAL = 60.0  # nodeIPPoolReconcile at most this often
RECONCILE_COOLDOWN = 60.0  # reconcile ignores IPs it freed itself this recently
DECREASE_INTERVAL = 30.0  # minimum gap between two pool decreases
MIN_ENI_LIFETIME = 60.0  # a new ENI is not freed before this
IMDS_SYNC_TIMEOUT = 15.0  # waiting for a new ENI to appear in IMDS (upstream retries ~ 12x)

METRICS_PORT = 61678
INTROSPECTION_PORT = 61679


@dataclass(frozen=True)
class Config:
    profile: str = DEFAULT_PROFILE
    imds_endpoint: str = "http://169.254.169.254"
    ec2_endpoint: str | None = None
    region: str = "us-east-1"
    warm_eni_target: int = 1
    warm_ip_target: int = 0
    minimum_ip_target: int = 0
    warm_prefix_target: int = 0
    prefix_delegation: bool = False
    max_eni: int | None = None
    ip_cooldown: float = 30.0
    scale: float = 1.0
    cluster_name: str = "cnikit"
    state_dir: str = "/run/cnikit/daemon"
    metrics_addr: tuple[str, int] | None = ("0.0.0.0", METRICS_PORT)  # None: off
    introspection_addr: tuple[str, int] | None = ("0.0.0.0", INTROSPECTION_PORT)
    instance_id_header: str | None = None  # CNIKIT_INSTANCE_ID: who we are to a loopback IMDS
    # Upstream's IPv6 mode (ENABLE_IPv6=true, ENABLE_IPv4=false, prefix delegation): one /80
    # on the primary ENI, no pool manager (cnikit/daemon/ipv6.py).
    ipv6: bool = False
    # IPv6 pods' IPv4 egress through the node (upstream's egress-cni, ENABLE_V4_EGRESS):
    # an address of this range on the pod's v4if0, SNAT to the node's IPv4.
    v4_egress: bool = True
    v4_egress_range: str = "169.254.172.0/22"
    # Upstream's ENABLE_SUBNET_DISCOVERY (v1.18.0 on, default true): new ENIs go to the
    # tagged subnet of the node's AZ with the most free addresses (cnikit/daemon/subnets.py).
    subnet_discovery: bool = True

    # Scaled intervals: the only place the daemon reads time constants from.
    @property
    def strategy(self):
        """The profile's reconcile strategy (cnikit.daemon.reconcile.ReconcileStrategy)."""
        return profiles.get(self.profile).reconcile

    @property
    def pool_interval(self) -> float:
        return POOL_INTERVAL * self.scale

    @property
    def reconcile_interval(self) -> float:
        return RECONCILE_INTERVAL * self.scale

    @property
    def reconcile_cooldown(self) -> float:
        return RECONCILE_COOLDOWN * self.scale

    @property
    def decrease_interval(self) -> float:
        return DECREASE_INTERVAL * self.scale

    @property
    def min_eni_lifetime(self) -> float:
        return MIN_ENI_LIFETIME * self.scale

    @property
    def ip_cooldown_scaled(self) -> float:
        return self.ip_cooldown * self.scale

    @property
    def imds_sync_timeout(self) -> float:
        return max(IMDS_SYNC_TIMEOUT * self.scale, 1.0)

    @property
    def warm_target_defined(self) -> bool:
        """Upstream: WARM_IP_TARGET or MINIMUM_IP_TARGET switch the pool to IP accounting."""
        return self.warm_ip_target > 0 or self.minimum_ip_target > 0


def _int(env: dict, name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be >= {minimum}")
    return value


def _bool(env: dict, name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise UsageError(f"{name}={raw!r} must be true or false")


def _addr(raw: str | None, default: tuple[str, int], name: str) -> tuple[str, int] | None:
    if not raw:
        return default
    if raw == "off":
        return None
    host, _, port = raw.rpartition(":")
    try:
        return (host or "0.0.0.0", int(port))
    except ValueError:
        raise UsageError(f"{name}={raw!r} must be HOST:PORT") from None


def from_env(env: dict | None = None) -> Config:
    """Read the daemon's configuration; a bad value is a one-line UsageError."""
    env = dict(os.environ if env is None else env)
    profile = env.get("CNIKIT_PROFILE") or DEFAULT_PROFILE
    if profile not in profiles.names():
        raise UsageError(f"CNIKIT_PROFILE={profile!r} is not one of {', '.join(profiles.names())}")
    pd = _bool(env, "ENABLE_PREFIX_DELEGATION", False)
    warm_prefix = _int(env, "WARM_PREFIX_TARGET", 0)
    # Upstream: with prefix delegation and no target at all, keep one warm prefix.
    warm_ip = _int(env, "WARM_IP_TARGET", 0)
    min_ip = _int(env, "MINIMUM_IP_TARGET", 0)
    if pd and warm_prefix == 0 and warm_ip == 0 and min_ip == 0:
        warm_prefix = 1
    ipv6 = _bool(env, "ENABLE_IPv6", False)
    # Upstream's isConfigValid: one family at a time, and IPv6 only with prefixes.
    if ipv6 and _bool(env, "ENABLE_IPv4", True):
        raise UsageError("ENABLE_IPv6=true needs ENABLE_IPv4=false: the VPC CNI does not "
                         "support dual stack mode")
    if not ipv6 and not _bool(env, "ENABLE_IPv4", True):
        raise UsageError("ENABLE_IPv4=false needs ENABLE_IPv6=true: no address family left")
    if ipv6 and not pd:
        raise UsageError("ENABLE_IPv6=true needs ENABLE_PREFIX_DELEGATION=true (IPv6 pods "
                         "take their addresses from the node's /80 prefix)")
    return Config(
        profile=profile,
        imds_endpoint=(env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254").rstrip("/"),
        ec2_endpoint=env.get("AWS_ENDPOINT_URL_EC2") or env.get("AWS_ENDPOINT_URL") or None,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        warm_eni_target=_int(env, "WARM_ENI_TARGET", 1),
        warm_ip_target=warm_ip,
        minimum_ip_target=min_ip,
        warm_prefix_target=warm_prefix,
        prefix_delegation=pd,
        max_eni=_int(env, "MAX_ENI", None, minimum=1),
        ip_cooldown=float(_int(env, "IP_COOLDOWN_PERIOD", 30)),
        scale=_scale(env),
        cluster_name=env.get("CLUSTER_NAME") or "cnikit",
        state_dir=env.get("CNIKIT_STATE_DIR") or "/run/cnikit/daemon",
        metrics_addr=_addr(env.get("CNIKIT_METRICS_ADDR"), ("0.0.0.0", METRICS_PORT), "CNIKIT_METRICS_ADDR"),
        introspection_addr=_addr(
            env.get("CNIKIT_INTROSPECTION_ADDR"), ("0.0.0.0", INTROSPECTION_PORT), "CNIKIT_INTROSPECTION_ADDR"
        ),
        instance_id_header=env.get("CNIKIT_INSTANCE_ID") or None,
        ipv6=ipv6,
        v4_egress=_bool(env, "ENABLE_V4_EGRESS", True),
        v4_egress_range=_egress_range(env),
        subnet_discovery=_bool(env, "ENABLE_SUBNET_DISCOVERY", True),
    )


def _egress_range(env: dict) -> str:
    raw = env.get("CNIKIT_V4_EGRESS_RANGE") or "169.254.172.0/22"
    try:
        net = ipaddress.IPv4Network(raw)
    except ValueError:
        raise UsageError(f"CNIKIT_V4_EGRESS_RANGE={raw!r} is not an IPv4 network") from None
    if net.num_addresses < 4:
        raise UsageError(f"CNIKIT_V4_EGRESS_RANGE={raw!r} is too small (its first address "
                         "is the pods' gateway)")
    return str(net)


def _scale(env: dict) -> float:
    raw = env.get("CNIKIT_TIME_SCALE")
    if raw is None:
        return time_scale()
    saved = os.environ.get("CNIKIT_TIME_SCALE")
    os.environ["CNIKIT_TIME_SCALE"] = raw
    try:
        return time_scale()
    finally:
        if saved is None:
            del os.environ["CNIKIT_TIME_SCALE"]
        else:
            os.environ["CNIKIT_TIME_SCALE"] = saved
