"""The kit's table of instance types (cnikit/cloud/instance_types.json): every figure is
EC2's, as DescribeInstanceTypes answers it in moto's copy of EC2's data (the ENI, IPv4 and
card figures are also those of upstream's generated table, which agrees with it)."""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

import pytest

from cnikit.cloud.limits import BRANCH_INTERFACES, FALLBACK, can_trunk
from cnikit.scenarios.engine.registry import Scenario

EC2 = json.loads(gzip.decompress(
    files("moto").joinpath("ec2/resources/instance_types.json.gz").read_bytes()))


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_every_figure_is_ec2s(name):
    ours, net = FALLBACK[name], EC2[name]["NetworkInfo"]
    assert ours.max_enis == net["MaximumNetworkInterfaces"]
    assert ours.ipv4_per_eni == net["Ipv4AddressesPerInterface"]
    assert ours.ipv6_per_eni == (net["Ipv6AddressesPerInterface"] if net["Ipv6Supported"] else 0)
    cards = sorted(net["NetworkCards"], key=lambda c: c["NetworkCardIndex"])
    assert [c["NetworkCardIndex"] for c in cards] == list(range(len(cards)))
    assert ours.card_limits == tuple(c["MaximumNetworkInterfaces"] for c in cards)
    assert ours.efa == (net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
    assert ours.efa == 0 or net["EfaSupported"]
    assert ours.encryption_in_transit == net["EncryptionInTransitSupported"]


def test_the_table_holds_the_kinds_of_type_the_kit_needs():
    assert Scenario.__dataclass_fields__["instance_type"].default in FALLBACK
    several_cards = {n for n, t in FALLBACK.items() if len(t.card_limits) > 1}
    assert {"p5.48xlarge", "p4d.24xlarge", "c6in.32xlarge", "trn1.32xlarge"} <= several_cards
    assert FALLBACK["p5.48xlarge"].card_limits == (2,) * 32  # 64 ENIs, but 2 on each card
    assert any(n.startswith("t3.") for n in FALLBACK) and "trn1.2xlarge" in FALLBACK
    assert FALLBACK["m1.small"].ipv6_per_eni == 0  # a Xen type: no IPv6 at all
    assert 10 <= len(FALLBACK) <= 100  # tens of types: read at every start


def test_a_trunk_needs_a_type_of_the_table_with_branch_figures():
    assert set(BRANCH_INTERFACES) <= set(FALLBACK)
    assert can_trunk("m5.large") and not can_trunk("t3.small") and not can_trunk("p5.48xlarge")
