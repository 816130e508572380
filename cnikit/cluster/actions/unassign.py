"""Another principal unassigns an address from whichever ENI holds it (an operator's
console). Not drawn by random chaos: a build can only learn of it at its next look at EC2,
so a fair verdict gives it that look before the next pod, and random chaos's schedule
does not wait (other-actor-sweeps-eni does)."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, ipv4
from faultcore.fault import Param


class Unassign(Action):
    name = "unassign"
    description = "another principal unassigns `ip` from the ENI that holds it, out of band"
    why = ("upstream 377/391: an address unassigned from the console stayed in IMDS and the "
           "datastore and was given to a pod")
    params = {"ip": Param(ipv4, help="the address to unassign")}

    @classmethod
    def perform(cls, nemesis, nodes, ip):
        return {"ip": ip, "eni": nemesis.unassign(ip, other=True)}
