"""An ENI's interface on a node taken down and brought back up, as a networkd restart or a
driver reset does (upstream #3162: a secondary ENI left unconfigured after networkd
restarted it). The kernel drops every route through the link while it is down, the build's
per-ENI route table with them. Not drawn by random chaos: the upstream builds leave the
table empty after it, so it would change the verdicts of every seed that draws it."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, node_param
from faultcore.fault import Param, integer, number


class LinkDown(Action):
    name = "link-down"
    description = ("take the node's ENI interface eth<device> down, and up again after "
                   "`seconds`")
    why = ("upstream #3162, #3309: networkd restarting a secondary ENI's interface drops its "
           "routes, and nothing puts them back")
    params = {"node": node_param(),
              "device": Param(integer(0, 15), 1, "the ENI's device index"),
              "seconds": Param(number(0, 600, lo_open=True), 1.0,
                               "how long the interface stays down")}

    @classmethod
    def perform(cls, nemesis, nodes, node, device, seconds):
        fid = nemesis.link_down(node, device, seconds)
        return {"id": fid, "node": node, "device": device, "seconds": seconds}
