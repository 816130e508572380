"""Which node an EC2 call acts on: the instance its parameters name, read from the gate's
mirror before the call is served.

Who called and which node a call concerns are two facts. A node's daemon calls from its
own ENI's address about its own node, but a design with a cluster side (an operator, as
Cilium's ENI mode has) makes every call from one place for every node: judged by the
caller alone, a crash point for node 1 never fires on the operator's attach for node 1, and
per-node throttling sees one caller. So the gate also says which instance a call acts on:
the `InstanceId` it names, else the instance its `NetworkInterfaceId` (or its attachment,
`AttachmentId`) is attached to, a branch ENI's trunk's for a branch. Read before the call,
so a detach or a delete still names the instance the ENI was on. A call that names neither
(CreateNetworkInterface: a subnet says no node; a Describe) acts on no node the parameters
tell: the reader falls back to the caller (a node creating its own ENI), and for an ENI an
operator creates, its later attach names the node.
"""

from __future__ import annotations

from cnikit.cloud.models import Mirror


def acted_on(mirror: Mirror | None, params: dict[str, str]) -> str | None:
    """The instance the call acts on, from its parameters and the mirror; None when they
    name none (or the region's mirror is not loaded yet)."""
    named = params.get("InstanceId") or _single(params, "InstanceId")
    if named:
        return named
    if mirror is None:
        return None
    eni_id = params.get("NetworkInterfaceId")
    if eni_id not in mirror.enis and params.get("AttachmentId"):
        eni = mirror.eni_by_attachment(params["AttachmentId"])
        eni_id = eni.eni_id if eni is not None else None
    # The ENI's instance, a branch's trunk's for a branch (the snapshot is kept per change).
    return mirror.snapshot().reached_instance(eni_id) if eni_id else None


def _single(params: dict[str, str], name: str) -> str | None:
    """A list parameter's one member (TerminateInstances' InstanceId.1), None for several."""
    members = [v for k, v in params.items() if k.startswith(name + ".")]
    return members[0] if len(members) == 1 else None
