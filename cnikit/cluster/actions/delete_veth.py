"""A pod's host-side veth deleted under the build (an operator's cleanup script, a crashed
runtime's leftovers sweep): the pod's interface goes with it. Not drawn by random chaos:
the pod is dark whatever the build does; what is judged is what the build does next (its
DEL, and the rules it leaves)."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.fault import Param


class DeleteVeth(Action):
    name = "delete-veth"
    description = "delete the host-side veth that routes `pod`'s address on its node"
    why = ("upstream #3309's neighbourhood: host links removed under the CNI; its DEL and "
           "its rules must cope with a veth already gone")
    params = {"pod": Param(text, help="the pod's name")}

    @classmethod
    def perform(cls, nemesis, nodes, pod):
        return {"pod": pod, "link": nemesis.delete_host_veth(pod)}
