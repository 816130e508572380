"""Another principal makes a subnet CIDR reservation in the nodes' subnet."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.fault import Param, choice, optional


class ReserveCidr(Action):
    name = "reserve-cidr"
    description = ("another principal reserves `cidr` of `subnet` (default: the nodes'), "
                   "`type` explicit (no address picked from it for a count) or prefix (kept "
                   "for delegated prefixes)")
    why = ("upstream #2749, #1836: subnet CIDR reservations decide where /28 prefixes can "
           "come from; an explicit one takes a range away from every automatic pick")
    params = {"cidr": Param(text, help="the range to reserve, inside the subnet"),
              "type": Param(choice("explicit", "prefix"), "explicit", "explicit or prefix"),
              "subnet": Param(optional(text), None, "the subnet id (the nodes' when null)")}

    @classmethod
    def perform(cls, nemesis, nodes, cidr, type, subnet):  # noqa: A002 - EC2's word
        return {"reservation": nemesis.reserve_cidr(cidr, type, subnet)}
