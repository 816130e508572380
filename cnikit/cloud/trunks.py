"""ENI trunking (security groups for pods) on the gate's mirror: trunk ENIs, branch ENIs
associated with them under a VLAN id (or a GRE key), and the rules EC2 enforces on both.

moto (5.2) and LocalStack model none of it: every ENI is shown as interfaceType
"interface" and no trunk action is answered. So, as /28 prefixes, trunking lives only in
the gate: an ENI's type and the associations are kept in the mirror (`Mirror.associations`)
across resyncs, and dropped with the ENIs they name.

Rules (each `plan_*`/`check_*` raises Ec2Error and changes nothing):
- CreateNetworkInterface takes InterfaceType `interface` (the default), `trunk` or `efa`;
  `branch` is refused (EC2's documentation: a branch is made by association, not created),
  and `trunk` only when the account may use ENI trunking (`Backend.trunking`);
- a trunk attaches only to an instance type that supports trunking (limits.BRANCH_INTERFACES)
  and only as that instance's one trunk;
- an association joins a branch that is a plain, unattached, unassociated ENI to an attached
  trunk of the same VPC, under a VLAN id (1-4094, 802.1Q's usable range) or a GRE key,
  unique on that trunk, while the trunk carries fewer branches than its instance type allows.

The trunk actions are a limited preview whose errors EC2 does not document: the gate answers
the codes EC2 uses for the same situation elsewhere (InvalidNetworkInterfaceID.NotFound,
InvalidNetworkInterface.InUse, AttachmentLimitExceeded, UnsupportedOperation, IncorrectState)
and InvalidAssociationID.NotFound for an unknown association (the code
aws/amazon-vpc-resource-controller-k8s matches on, pkg/aws/errors/ec2_errors.go).
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import TYPE_CHECKING

from cnikit.cloud.errors import Ec2Error, invalid_value
from cnikit.cloud.limits import BRANCH_INTERFACES
from cnikit.cloud.records import Eni, InstanceState, TrunkAssociation

if TYPE_CHECKING:
    from cnikit.cloud.models import Mirror

# What CreateNetworkInterface's InterfaceType may be here. EC2 also takes `efa-only` (an
# interface without addresses), which the gate's address rules do not model.
CREATABLE_TYPES = ("interface", "trunk", "efa")
VLAN_IDS = range(1, 4095)  # 802.1Q: 0 means untagged and 4095 is reserved


def not_enabled() -> Ec2Error:
    return Ec2Error("UnsupportedOperation", "ENI trunking is not enabled for this account.")


def check_new_type(interface_type: str | None, trunking: bool) -> str:
    """The type of a new ENI (CreateNetworkInterface's InterfaceType)."""
    kind = interface_type or "interface"
    if kind not in CREATABLE_TYPES:
        raise invalid_value(f"Invalid value '{kind}' for InterfaceType. Valid values: "
                            + ", ".join(CREATABLE_TYPES))
    if kind == "trunk" and not trunking:
        raise not_enabled()
    return kind


def check_attach(mirror: Mirror, eni: Eni, inst: InstanceState) -> None:
    """A trunk attaches only to a trunking-compatible type, as its instance's only trunk;
    a branch never attaches (it reaches the instance through its trunk)."""
    if eni.interface_type == "branch":
        raise Ec2Error("InvalidNetworkInterface.InUse",
                       f"Interface: [{eni.eni_id}] is a branch interface of a trunk.")
    if eni.interface_type != "trunk":
        return
    if not BRANCH_INTERFACES.get(inst.instance_type):
        raise Ec2Error("UnsupportedOperation",
                       f"The instance type {inst.instance_type} does not support ENI trunking.")
    if any(e.interface_type == "trunk" for e in mirror.instance_enis(inst.instance_id)):
        raise invalid_value(f"Instance '{inst.instance_id}' already has a trunk interface.")


def new_association_id() -> str:
    return "trunk-assoc-" + secrets.token_hex(9)[:17]


def plan_associate(mirror: Mirror, branch_id: str | None, trunk_id: str | None,
                   vlan_id: int | None, gre_key: int | None, trunking: bool) -> TrunkAssociation:
    """The association AssociateTrunkInterface would make, or EC2's refusal."""
    if not trunking:
        raise not_enabled()
    trunk = mirror.eni(trunk_id)
    branch = mirror.eni(branch_id)
    if vlan_id is not None and gre_key is not None:
        raise Ec2Error("InvalidParameterCombination", "Specify either VlanId or GreKey, not both")
    if vlan_id is None and gre_key is None:
        raise Ec2Error("MissingParameter", "Either 'VlanId' or 'GreKey' must be specified")
    if trunk.interface_type != "trunk":
        raise invalid_value(f"Network interface {trunk.eni_id} is not a trunk interface.")
    if branch.eni_id == trunk.eni_id or branch.interface_type == "trunk":
        raise invalid_value(f"Network interface {branch.eni_id} is a trunk interface: it "
                            "cannot be a branch.")
    if branch.interface_type == "branch":
        held = next(a for a in mirror.associations.values() if a.branch_id == branch.eni_id)
        raise Ec2Error("InvalidNetworkInterface.InUse",
                       f"Interface: [{branch.eni_id}] is already associated with "
                       f"{held.trunk_id} ({held.association_id}).")
    if branch.attachment is not None:
        raise Ec2Error("InvalidNetworkInterface.InUse", f"Interface: [{branch.eni_id}] in use.")
    if branch.interface_type != "interface":
        raise invalid_value(f"Network interface {branch.eni_id} of type "
                            f"{branch.interface_type} cannot be a branch.")
    if branch.vpc_id != trunk.vpc_id:
        raise invalid_value(f"Network interfaces {branch.eni_id} and {trunk.eni_id} are not "
                            "in the same VPC.")
    if trunk.attachment is None or trunk.attachment.status != "attached":
        raise Ec2Error("IncorrectState",
                       f"Trunk interface {trunk.eni_id} is not attached to an instance.")
    on_trunk = [a for a in mirror.associations.values() if a.trunk_id == trunk.eni_id]
    if vlan_id is not None:
        if vlan_id not in VLAN_IDS:
            raise invalid_value(f"Invalid value '{vlan_id}' for VlanId: it must be between "
                                f"{VLAN_IDS.start} and {VLAN_IDS.stop - 1}.")
        if any(a.vlan_id == vlan_id for a in on_trunk):
            raise invalid_value(f"VLAN id {vlan_id} is already in use on trunk interface "
                                f"{trunk.eni_id}.")
    if gre_key is not None and any(a.gre_key == gre_key for a in on_trunk):
        raise invalid_value(f"GRE key {gre_key} is already in use on trunk interface "
                            f"{trunk.eni_id}.")
    itype = mirror.instances[trunk.attachment.instance_id].instance_type
    limit = BRANCH_INTERFACES.get(itype, 0)
    if len(on_trunk) + 1 > limit:
        raise Ec2Error("AttachmentLimitExceeded",
                       f"Branch interface count {len(on_trunk) + 1} exceeds the limit "
                       f"({limit}) for {itype}")
    return TrunkAssociation(new_association_id(), branch.eni_id, trunk.eni_id,
                            "VLAN" if vlan_id is not None else "GRE", vlan_id, gre_key)


def apply_associate(mirror: Mirror, assoc: TrunkAssociation) -> None:
    mirror.associations[assoc.association_id] = assoc
    mirror.put_eni(replace(mirror.enis[assoc.branch_id], interface_type="branch"))
    mirror.changed()


def plan_disassociate(mirror: Mirror, association_id: str | None) -> TrunkAssociation:
    assoc = mirror.associations.get(association_id or "")
    if assoc is None:
        raise Ec2Error("InvalidAssociationID.NotFound",
                       f"The association ID '{association_id}' does not exist")
    return assoc


def apply_disassociate(mirror: Mirror, association_id: str) -> None:
    drop(mirror, association_id)
    mirror.changed()


def drop(mirror: Mirror, association_id: str) -> None:
    """The association gone, its branch a plain interface again (when it still exists)."""
    assoc = mirror.associations.pop(association_id)
    branch = mirror.enis.get(assoc.branch_id)
    if branch is not None:
        mirror.put_eni(replace(branch, interface_type="interface"))


def drop_eni(mirror: Mirror, eni_id: str) -> None:
    """What deleting an ENI does to trunking: a deleted branch leaves its trunk, and a
    deleted trunk's branches become plain interfaces, left in the VPC (upstream #3018's
    leaked branch ENIs)."""
    for assoc in [a for a in mirror.associations.values() if eni_id in (a.branch_id, a.trunk_id)]:
        drop(mirror, assoc.association_id)


def branches_of(mirror_associations: dict[str, TrunkAssociation]) -> dict[str, TrunkAssociation]:
    """Branch ENI id -> its association."""
    return {a.branch_id: a for a in mirror_associations.values()}
