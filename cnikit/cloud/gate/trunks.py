"""Branch ENIs on trunk ENIs: AssociateTrunkInterface, DisassociateTrunkInterface and
DescribeTrunkInterfaceAssociations.

The gate answers all three from its mirror, as it answers for /28 prefixes: the upstream
models no trunking (moto 5.2 answers none of these actions, and shows every ENI as
"interface"), so nothing is forwarded. The rules are cnikit/cloud/trunks.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from xml.sax.saxutils import escape

from cnikit.cloud import query as Q
from cnikit.cloud import responses as R
from cnikit.cloud import trunks as T
from cnikit.cloud.errors import Ec2Error, invalid_value
from cnikit.cloud.gate.actions import ActionGroup, action
from cnikit.cloud.gate.backend import Region
from cnikit.cloud.records import TrunkAssociation

# DescribeTrunkInterfaceAssociations' MaxResults is 5 to 255 (botocore's model).
MOST_PER_PAGE = 255


def association_xml(a: TrunkAssociation) -> str:
    keyed = (f"<vlanId>{a.vlan_id}</vlanId>" if a.vlan_id is not None
             else f"<greKey>{a.gre_key}</greKey>")
    return (f"<associationId>{a.association_id}</associationId>"
            f"<branchInterfaceId>{a.branch_id}</branchInterfaceId>"
            f"<trunkInterfaceId>{a.trunk_id}</trunkInterfaceId>"
            f"<interfaceProtocol>{a.protocol}</interfaceProtocol>{keyed}<tagSet/>")


def client_token_xml(params: dict[str, str]) -> str:
    token = params.get("ClientToken")
    return f"<clientToken>{escape(token)}</clientToken>" if token else ""


def associate_xml(a: TrunkAssociation, params: dict[str, str]) -> bytes:
    return R.action_xml("AssociateTrunkInterface",
                        f"<interfaceAssociation>{association_xml(a)}</interfaceAssociation>"
                        + client_token_xml(params))


def describe_xml(found: list[TrunkAssociation], next_token: str | None) -> bytes:
    body = "".join(f"<item>{association_xml(a)}</item>" for a in found)
    token = f"<nextToken>{next_token}</nextToken>" if next_token else ""
    return R.action_xml("DescribeTrunkInterfaceAssociations",
                        f"<interfaceAssociationSet>{body}</interfaceAssociationSet>{token}")


# DescribeTrunkInterfaceAssociations' filters: the values each matches against. EC2
# documents gre-key and interface-protocol; aws/amazon-vpc-resource-controller-k8s filters by
# trunk-interface-association.trunk-interface-id.
FILTERS: dict[str, Callable[[TrunkAssociation], list[str]]] = {
    "gre-key": lambda a: [str(a.gre_key)] if a.gre_key is not None else [],
    "interface-protocol": lambda a: [a.protocol],
    "vlan-id": lambda a: [str(a.vlan_id)] if a.vlan_id is not None else [],
    "trunk-interface-association.association-id": lambda a: [a.association_id],
    "trunk-interface-association.branch-interface-id": lambda a: [a.branch_id],
    "trunk-interface-association.trunk-interface-id": lambda a: [a.trunk_id],
}


class TrunkActions(ActionGroup):
    @action("AssociateTrunkInterface", gate_only=True)
    async def _associate(self, r: Region, params, headers) -> tuple[int, bytes]:
        b = self.backend
        async with b.lock:
            assoc = T.plan_associate(r.mirror, params.get("BranchInterfaceId"),
                                     params.get("TrunkInterfaceId"),
                                     Q.int_param(params, "VlanId"),
                                     Q.int_param(params, "GreKey"), b.trunking)
            b.mutate(r, T.apply_associate, r.mirror, assoc)
            b.audit.add("AssociateTrunkInterface", assoc.branch_id,
                        r.mirror.enis[assoc.branch_id].ips,
                        instance_id=r.mirror.enis[assoc.trunk_id].attachment.instance_id,
                        region=r.name)
        return 200, associate_xml(assoc, params)

    @action("DisassociateTrunkInterface", gate_only=True)
    async def _disassociate(self, r: Region, params, headers) -> tuple[int, bytes]:
        b = self.backend
        async with b.lock:
            assoc = T.plan_disassociate(r.mirror, params.get("AssociationId"))
            trunk = r.mirror.enis.get(assoc.trunk_id)
            b.mutate(r, T.apply_disassociate, r.mirror, assoc.association_id)
            b.audit.add("DisassociateTrunkInterface", assoc.branch_id,
                        instance_id=trunk.attachment.instance_id
                        if trunk and trunk.attachment else None, region=r.name)
        return 200, R.action_xml("DisassociateTrunkInterface",
                                 "<return>true</return>" + client_token_xml(params))

    @action("DescribeTrunkInterfaceAssociations", gate_only=True)
    async def _describe(self, r: Region, params, headers) -> tuple[int, bytes]:
        known = r.mirror.associations
        ids = Q.list_param(params, "AssociationId")
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise Ec2Error("InvalidAssociationID.NotFound",
                           f"The association ID '{unknown[0]}' does not exist")
        chosen = [known[i] for i in dict.fromkeys(ids)] if ids else list(known.values())
        wanted = Q.filters(params)
        for name in wanted:
            if name not in FILTERS:
                raise invalid_value(f"The filter '{name}' is invalid")
        chosen = [a for a in chosen
                  if Q.matches(lambda name, a=a: FILTERS[name](a), wanted)]
        page, next_token = Q.page(chosen, params, MOST_PER_PAGE)
        return 200, describe_xml(page, next_token)
