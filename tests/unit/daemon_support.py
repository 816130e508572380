"""What the daemon's unit tests share: the daemon (cnikit.daemon.ipamd) on a fake clock with
in-memory EC2 and IMDS views (cnikit.daemon.fakes), one sandbox key per pod, and time that
passes one pool interval at a time."""

from __future__ import annotations

import copy

from cnikit.daemon import profiles
from cnikit.daemon.checkpoint import JsonCheckpoint, MemoryCheckpoint
from cnikit.daemon.clock import FakeClock
from cnikit.daemon.config import Config
from cnikit.daemon.datastore import IpamKey
from cnikit.daemon.fakes import FakeEc2, FakeImds
from cnikit.daemon.ipamd import IpamD

PROFILES = profiles.names("ipv4")  # the registry: a new profile is tested here too
PROFILES_IPV6 = profiles.names("ipv6")


def key(n: int) -> IpamKey:
    return IpamKey("aws-cni", f"sandbox-{n}", "eth0")


def make(profile="hardened", instance_type="m5.large", ckpt=None, ec2=None, clock=None, **cfg):
    ec2 = ec2 or FakeEc2(instance_type=instance_type)
    imds = FakeImds(ec2)
    clock = clock or FakeClock()
    ckpt = ckpt if ckpt is not None else MemoryCheckpoint()
    d = IpamD(Config(profile=profile, **cfg), ec2, imds, clock, ckpt)
    d.start()
    return d, ec2, imds, clock, ckpt


def start(profile, ec2, imds, clock, ckpt, **cfg) -> IpamD:
    d = IpamD(Config(profile=profile, **cfg), ec2, imds, clock, ckpt)
    d.start()
    return d


def on_disk(tmp_path, profile: str = "hardened", **cfg):
    """A started daemon on fresh fakes whose checkpoint is a file, what a restart reads:
    (daemon, ec2, imds, clock, checkpoint)."""
    ckpt = JsonCheckpoint(tmp_path / "ipam.json")
    ec2, clock = FakeEc2(), FakeClock()
    imds = FakeImds(ec2)
    return start(profile, ec2, imds, clock, ckpt, **cfg), ec2, imds, clock, ckpt


def settle(d, clock, seconds):
    """Run the pool manager every pool interval for `seconds` of fake time."""
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(d.cfg.pool_interval)
        d.tick()


def lag_describe(ec2: FakeEc2):
    """From now on Describe shows the ENIs as they are at this moment (until restored)."""
    before = ec2.describe_enis(ec2.instance_id)
    real = ec2.describe_enis
    ec2.describe_enis = lambda instance_id: copy.deepcopy(before)
    return real


def pool_matches_ec2(d, ec2) -> bool:
    """Every ENI the daemon uses holds in its datastore exactly what EC2 has on it."""
    return all(set(eni.ips()) == set(ec2.enis[eni_id].secondary_ips)
               for eni_id, eni in d.ds.enis.items())


def allocatable(d) -> set[str]:
    return {ip for eni in d.ds.enis.values() for ip in eni.ips()
            if f"{ip}/32" not in d.ds.quarantined}


def pod_ips(d, clock, first: int, n: int) -> list[str]:
    out = []
    for i in range(first, first + n):
        a = d.add(key(i))
        while a is None:  # the pool grows on its next pass
            settle(d, clock, d.cfg.pool_interval)
            a = d.add(key(i))
        out.append(a.ip)
    return out
