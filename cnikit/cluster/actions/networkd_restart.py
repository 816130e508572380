"""What a systemd-networkd restart does to a node's policy routing: every `ip rule` but
the kernel's own three removed, and every route table but main, local and default emptied
(upstream #3309: the rules were lost and pods' traffic left by the wrong interface;
Bottlerocket #3436). Not drawn by random chaos: upstream's builds never put the rules back,
so it would change the verdicts of every seed that draws it."""

from __future__ import annotations

from cnikit.cluster.actions.base import Action, node_param
from faultcore.errors import SpecError
from faultcore.fault import Param, checked


def _flag(name, v):
    if not isinstance(v, bool):
        raise SpecError(f"{name} must be true or false, got {v!r}")
    return v


flag = checked(_flag, "true or false", bool)


class NetworkdRestart(Action):
    name = "networkd-restart"
    description = ("flush the node's policy rules (but the kernel's) and its route tables "
                   "(but main, local and default), as a networkd restart does")
    why = ("upstream #3309: after systemd-networkd restarted, the ip rules were gone and "
           "nothing reconciled them; pods' traffic left by the wrong ENI")
    params = {"node": node_param(),
              "rules": Param(flag, True, "flush the policy rules"),
              "tables": Param(flag, True, "flush the route tables")}

    @classmethod
    def perform(cls, nemesis, nodes, node, rules, tables):
        gone = nemesis.flush_host_routing(node, rules=rules, tables=tables)
        return {"node": node, **gone}
