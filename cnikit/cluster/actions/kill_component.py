"""A target's cluster-wide component killed; it stays down until a `restart-component`."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from cnikit.cluster.actions.kill import SIGNALS
from faultcore.fault import Param, choice


class KillComponent(Action):
    name = "kill-component"
    description = ("send a cluster-wide component of the target (an operator) a signal, its "
                   "process group with it (SIGKILL by default); down until restart-component")
    why = "an operator crashed or evicted mid-handshake (cilium/cilium #32531, #13412)"
    params = {"component": Param(text, help="the component's name in the target"),
              "signal": Param(choice(*SIGNALS), "KILL", "KILL or TERM")}

    @classmethod
    def perform(cls, nemesis, nodes, component, signal):
        nemesis.kill_component(component, SIGNALS[signal])
        return {"component": component, "signal": signal}
