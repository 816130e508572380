"""An interface's MTU changed under the build: an ENI's (as networkd applying a jumbo or a
default MTU does) or a pod's host veth. Not drawn by random chaos: it changes every seed's
schedule, and the prober's small packets do not see it."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.errors import SpecError
from faultcore.fault import Param, integer, optional


class SetMtu(Action):
    name = "set-mtu"
    description = ("set the MTU of the node's ENI interface eth<device>, or of `pod`'s host "
                   "veth (its node then comes from the pod)")
    why = ("upstream #3309, #3162: networkd re-applying its own link settings under the CNI "
           "(AWS_VPC_ENI_MTU is the CNI's own)")
    params = {"node": Param(integer(0, 10_000), 0, "the node (0-based) of `device`"),
              "mtu": Param(integer(576, 9001), help="the new MTU"),
              "device": Param(optional(integer(0, 15)), None, "the ENI's device index"),
              "pod": Param(optional(text), None, "a pod whose host veth to change instead")}

    @classmethod
    def perform(cls, nemesis, nodes, node, mtu, device, pod):
        if (device is None) == (pod is None):
            raise SpecError("set-mtu needs exactly one of device and pod")
        link = nemesis.set_mtu(node, mtu, device_index=device, pod=pod)
        return {"node": node, "link": link, "mtu": mtu}
