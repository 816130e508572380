"""Another principal's leaked-ENI sweep: every available ENI with the cluster's tag deleted."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from cnikit.cluster.nemesis_ec2_acts import CLUSTER_TAG
from faultcore.fault import Chaos, Param, optional


class SweepEnis(Action):
    name = "sweep-enis"
    description = ("another principal deletes every `available` ENI carrying `tag` (with "
                   "`value`, if given): an ENI caught between create and attach goes too")
    why = ("upstream 1099 (fix 1109): another node's leaked-ENI sweep deleted an ENI a node "
           "had just created and not yet attached")
    params = {"tag": Param(text, CLUSTER_TAG, "the tag key the sweep looks for"),
              "value": Param(optional(text), None, "the tag's value (any when null)")}
    chaos = Chaos(rank=3)

    @classmethod
    def perform(cls, nemesis, nodes, tag, value):
        return {"deleted": nemesis.sweep_enis(tag=tag, value=value)}
