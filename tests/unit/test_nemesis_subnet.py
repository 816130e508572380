"""The nemesis's acts on a subnet's address space (cnikit.cluster.nemesis_subnet), by name
as `$GATE/nemesis` and scenarios drive them: another tenant fragments the nodes' subnet so
no /28 is left to delegate, another principal reserves a range. moto behind the gate."""

from __future__ import annotations

import ipaddress

import pytest

from cnikit.check.history import History
from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
from cnikit.cluster.actions.base import act
from cnikit.cluster.nemesis import Nemesis
from faultcore.errors import SpecError
from tests.unit.ec2_support import refused


class Nodes:
    """The run's nodes as the nemesis asks about them (CniCluster is a NodeDaemons)."""

    def __init__(self, topo):
        self.topo = topo

    def instance_id(self, node):
        return self.topo.instances[node].instance_id


@pytest.fixture
def nemesis(gate_cloud, gate_new_vpc):
    gate_new_vpc(gate_cloud, nodes=2)  # another run's VPC in the same EC2: left alone
    topo = gate_new_vpc(gate_cloud, nodes=2)
    h = History()
    return Nemesis(h, cloud=gate_cloud, daemons=Nodes(topo)), h, topo


def infos(h: History, op: str) -> list[dict]:
    return [e["value"] for e in h.entries()
            if e["process"] == "nemesis" and e["f"] == op and e["type"] == "info"]


def test_a_fragmented_subnet_has_addresses_but_no_prefix(nemesis):
    n, h, topo = nemesis
    ec2 = n.cloud.client()
    eni = topo.instances[0].primary_eni_id
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1)  # before: one
    done = act(n, {"action": "fragment-subnet"}, 2)
    net = ipaddress.ip_network(topo.subnet_cidr)
    # every /28 but the reserved first, the broadcast's last and the node's prefix: 13
    assert done["subnet"] == topo.subnet_id and len(done["ips"]) == 13
    assert len({ipaddress.ip_network(f"{ip}/28", strict=False) for ip in done["ips"]}) == 13
    refused(lambda: ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, Ipv4PrefixCount=1),
            "InsufficientCidrBlocks")
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                          SecondaryPrivateIpAddressCount=5)
    assert all(ipaddress.ip_address(a["PrivateIpAddress"]) in net
               for a in got["AssignedPrivateIpAddresses"])
    assert infos(h, "ec2-fragment-subnet")[0]["principal"] == "other"
    made = [r for r in n.cloud.gate.audit.records() if r.eni_id in done["enis"]]
    assert made and all(r.principal == OTHER_PRINCIPAL_KEY for r in made)


def test_a_reservation_by_name_takes_its_range_from_every_pick(nemesis):
    n, h, topo = nemesis
    ec2 = n.cloud.client()
    net = ipaddress.ip_network(topo.subnet_cidr)
    low, high = net.subnets(new_prefix=25)
    act(n, {"action": "fragment-subnet"}, 2)
    freed = n.whole_free_blocks(topo.subnet_id)
    assert freed == []
    done = act(n, {"action": "reserve-cidr", "cidr": str(high)}, 2)
    assert done["reservation"].startswith("scr-")
    assert infos(h, "ec2-reserve-cidr")[0]["target"]["type"] == "explicit"
    eni = topo.instances[1].primary_eni_id
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                          SecondaryPrivateIpAddressCount=5)
    assert all(ipaddress.ip_address(a["PrivateIpAddress"]) in low
               for a in got["AssignedPrivateIpAddresses"])


@pytest.mark.parametrize("spec, reason", [
    ({"action": "reserve-cidr"}, "reserve-cidr needs 'cidr'"),
    ({"action": "reserve-cidr", "cidr": "10.0.1.0/28", "type": "sometimes"},
     "type must be one of explicit, prefix"),
    ({"action": "fragment-subnet", "size": 28}, "unknown field 'size' for fragment-subnet"),
])
def test_a_bad_spec_is_refused_in_one_line(nemesis, spec, reason):
    n, h, _ = nemesis
    with pytest.raises(SpecError) as e:
        act(n, spec, 2)
    assert reason in str(e.value) and "\n" not in str(e.value)
    assert infos(h, "ec2-fragment-subnet") == infos(h, "ec2-reserve-cidr") == []
