"""Instance types: DescribeInstanceTypes, answered from the limits the gate enforces.

The answer's networking (ENIs, each network card's ENIs, IPv4 and IPv6 addresses per ENI,
EFA, in-transit encryption) is the record the gate's rules judge against
(backend.ensure_limits), so a client that sizes its pool from it meets no other limit. A
listing without names is the kit's table (cnikit/cloud/instance_types.json), filtered and
paged as EC2 does (MaxResults 5 to 100); the other attributes EC2 describes (vCPUs, memory)
are left out.

A type outside the table (upstream aws/amazon-vpc-cni-k8s #2468: a type newer than a
daemon's limits table) is still one EC2 knows: the gate launches it and describes it by name
with the upstream's figures (moto and LocalStack carry EC2's whole list), so a build meets
the gap only in its own table, where upstream met it. A name the upstream does not know
either is EC2's `InvalidInstanceType` here, and `InvalidParameterValue` to RunInstances.
"""

from __future__ import annotations

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud.errors import Ec2Error
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region
from cnikit.cloud.limits import FALLBACK, InstanceLimits


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _filter_values(name: str, t: InstanceLimits, field: str) -> list[str] | None:
    """A type's values for one of DescribeInstanceTypes' filters (None: not a filter)."""
    values = {
        "instance-type": name,
        "network-info.maximum-network-interfaces": t.max_enis,
        "network-info.maximum-network-cards": len(t.card_limits),
        "network-info.ipv4-addresses-per-interface": t.ipv4_per_eni,
        "network-info.ipv6-addresses-per-interface": t.ipv6_per_eni,
        "network-info.ipv6-supported": _flag(t.ipv6_per_eni > 0),
        "network-info.efa-supported": _flag(t.efa > 0),
        "network-info.efa-info.maximum-efa-interfaces": t.efa,
        "network-info.encryption-in-transit-supported": _flag(t.encryption_in_transit),
    }
    value = values.get(field)
    return None if value is None else [str(value)]


def type_xml(name: str, t: InstanceLimits) -> str:
    cards = "".join(f"<item><networkCardIndex>{i}</networkCardIndex>"
                    f"<maximumNetworkInterfaces>{most}</maximumNetworkInterfaces></item>"
                    for i, most in enumerate(t.card_limits))
    efa = (f"<efaInfo><maximumEfaInterfaces>{t.efa}</maximumEfaInterfaces></efaInfo>"
           if t.efa else "")
    return (f"<item><instanceType>{name}</instanceType><networkInfo>"
            f"<maximumNetworkInterfaces>{t.max_enis}</maximumNetworkInterfaces>"
            f"<maximumNetworkCards>{len(t.card_limits)}</maximumNetworkCards>"
            f"<defaultNetworkCardIndex>0</defaultNetworkCardIndex>"
            f"<networkCards>{cards}</networkCards>"
            f"<ipv4AddressesPerInterface>{t.ipv4_per_eni}</ipv4AddressesPerInterface>"
            f"<ipv6AddressesPerInterface>{t.ipv6_per_eni}</ipv6AddressesPerInterface>"
            f"<ipv6Supported>{_flag(t.ipv6_per_eni > 0)}</ipv6Supported>"
            f"<efaSupported>{_flag(t.efa > 0)}</efaSupported>{efa}"
            f"<encryptionInTransitSupported>{_flag(t.encryption_in_transit)}"
            f"</encryptionInTransitSupported></networkInfo></item>")


class InstanceTypeActions(ActionGroup):
    @action("DescribeInstanceTypes")
    async def _describe_types(self, r: Region, params, headers) -> tuple[int, bytes]:
        names = list(dict.fromkeys(Q.list_param(params, "InstanceType")))
        if names:
            found = {n: await self.backend.ensure_limits(n) for n in names}
            unknown = [n for n, t in found.items() if t is None]
            if unknown:
                raise Ec2Error("InvalidInstanceType", "The following supplied instance types "
                               f"do not exist: [{', '.join(unknown)}]")
        else:
            found = FALLBACK
        wanted = Q.filters(params)
        chosen = [(n, t) for n, t in found.items()
                  if Q.matches(lambda f, n=n, t=t: _filter_values(n, t, f), wanted)]
        shown, token = Q.page(chosen, params, most=100)
        inner = ("<instanceTypeSet>" + "".join(type_xml(n, t) for n, t in shown)
                 + "</instanceTypeSet>" + (f"<nextToken>{token}</nextToken>" if token else ""))
        return 200, R.action_xml("DescribeInstanceTypes", inner)
