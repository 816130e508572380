"""A node's daemon killed; it stays down until a `restart`."""

from __future__ import annotations

import signal

from cnikit.cluster.actions.base import Action, node_param
from faultcore.fault import Param, choice

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}


class Kill(Action):
    name = "kill"
    description = "send the node's daemon a signal (SIGKILL by default); down until a restart"
    why = "a crashed or evicted daemon (upstream 1091, 3019's restarts)"
    params = {"node": node_param(),
              "signal": Param(choice(*SIGNALS), "KILL", "KILL or TERM")}

    @classmethod
    def perform(cls, nemesis, nodes, node, signal):
        nemesis.kill_daemon(node, SIGNALS[signal])
        return {"node": node, "signal": signal}
