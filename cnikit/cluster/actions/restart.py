"""A node's daemon restarted (or started again after a kill), waited for until ready."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, node_param
from faultcore.fault import Param, number


class Restart(Action):
    name = "restart"
    description = "restart the node's daemon, its state kept, and wait until it is ready"
    why = "a DaemonSet's rolling update or CrashLoopBackOff (upstream 401, 732)"
    params = {"node": node_param(),
              "wait": Param(number(0, 600, lo_open=True), 60.0,
                            "seconds to wait for the daemon to become ready")}

    @classmethod
    def perform(cls, nemesis, nodes, node, wait):
        nemesis.restart_daemon(node, wait)
        return {"node": node, "ready": True}
