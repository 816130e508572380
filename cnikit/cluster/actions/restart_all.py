"""Every node's daemon killed, then all started together."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action
from faultcore.fault import Chaos, Param, number


class RestartAll(Action):
    name = "restart-all"
    description = ("every node's daemon SIGKILLed, then all started together and waited for "
                   "(their Describe-per-ENI calls meet at once)")
    why = ("upstream 873, 617 (fixes 808, 809, 909): every node restarted at once and "
           "throttled the whole account")
    params = {"wait": Param(number(0, 600, lo_open=True), 60.0,
                            "seconds to wait for each daemon to become ready")}
    chaos = Chaos(rank=1)

    @classmethod
    def perform(cls, nemesis, nodes, wait):
        failed = nemesis.restart_all(range(nodes), wait=wait)
        return {"nodes": nodes,
                "failed": {str(n): f"{type(e).__name__}: {e}"[:300]
                           for n, e in sorted(failed.items())}}
