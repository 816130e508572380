"""A target's cluster-wide component restarted (or started again after a kill), waited for
until ready."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, text
from faultcore.fault import Param, number


class RestartComponent(Action):
    name = "restart-component"
    description = ("restart a cluster-wide component of the target (an operator), its state "
                   "kept, and wait until it is ready")
    why = "an operator's rolling update or leader hand-over (cilium/cilium #13412)"
    params = {"component": Param(text, help="the component's name in the target"),
              "wait": Param(number(0, 600, lo_open=True), 60.0,
                            "seconds to wait for the component to become ready")}

    @classmethod
    def perform(cls, nemesis, nodes, component, wait):
        nemesis.restart_component(component, wait)
        return {"component": component, "ready": True}
