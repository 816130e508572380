"""Another tenant fragments the nodes' subnet: one address taken in every free /28."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.fault import Param, optional


class FragmentSubnet(Action):
    name = "fragment-subnet"
    description = ("another tenant takes one address in every /28 of `subnet` (default: the "
                   "nodes') that is whole free: prefixes are refused (InsufficientCidrBlocks) "
                   "while nearly every address stays free")
    why = ("upstream #2749 and #3264, cilium PR #48193: no aligned /28 left in a busy subnet, "
           "so prefix delegation fails though addresses are free")
    params = {"subnet": Param(optional(text), None, "the subnet id (the nodes' when null)")}

    @classmethod
    def perform(cls, nemesis, nodes, subnet):
        return nemesis.fragment_subnet(subnet)
