"""Another principal detaches an ENI out of band (Force), its addresses with it. Not drawn
by random chaos: the pods on that ENI go dark whatever the build does."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.fault import Param


class DetachEni(Action):
    name = "detach-eni"
    description = "another principal force-detaches `eni` from its instance, out of band"
    why = ("upstream 377/391, 1099: other actors on the node's ENIs; the build must stop "
           "handing out what EC2 took away")
    params = {"eni": Param(text, help="the ENI to detach (eni-...)")}

    @classmethod
    def perform(cls, nemesis, nodes, eni):
        nemesis.detach_eni(eni)
        return {"eni": eni, "detached": True}
