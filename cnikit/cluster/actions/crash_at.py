"""A crash point: the node's daemon SIGKILLed when the gate serves a given EC2 call from it
(cnikit.cluster.crash_point), after the call took effect and before its answer leaves."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, node_param
from cnikit.cluster.crash_point import CRASH_ACTIONS
from faultcore.fault import Chaos, Param, choice

# What random chaos arms a crash point after: the windows of upstream 66/401 (an ENI
# attached or addresses assigned, not yet recorded) and 732 (detached, not yet deleted).
DRAWN = ("AttachNetworkInterface", "AssignPrivateIpAddresses", "DetachNetworkInterface",
         "UnassignPrivateIpAddresses")


class CrashAt(Action):
    name = "crash-at"
    description = ("arm a crash point: the node's daemon is SIGKILLed once the gate served "
                   "`after` from it, before the answer leaves; down until a restart")
    why = ("upstream 66 (fix 74), 401: a restart between create/attach and the datastore "
           "update lost the ENI; 732: a restart between detach and delete leaked it")
    params = {"node": node_param(),
              "after": Param(choice(*CRASH_ACTIONS), help="the EC2 action to crash after")}
    chaos = Chaos(rank=2, draw=lambda rng: {"after": rng.choice(DRAWN)})

    @classmethod
    def perform(cls, nemesis, nodes, node, after):
        point = nemesis.crash_at(node, after)
        return {"id": point.id, "node": node, "after": after, "armed": True}
