"""The daemon is killed right after EC2 attached a new ENI to its node, before it heard the
answer (upstream #66, fixed by #74; #401).

Node 0 fills its first ENI until the build attaches a second; the gate kills the daemon the
moment it served that AttachNetworkInterface (a crash point, cnikit.cluster.crash_point),
so the daemon cannot have recorded the ENI. Restarted, a correct build adopts the ENI it
finds attached (or detaches and deletes it): pods keep working and new pods land on it. A
build that forgets it leaks an ENI for good; with the node held to two ENIs it then has
nowhere to put the next pods, a liveness violation.
"""

from __future__ import annotations

from cnikit.scenarios.common import crash_while_adding, peers, settles_after_crash
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "crash-after-attach",
    "the daemon is killed right after EC2 attached a new ENI, before it heard the answer",
    why="upstream #66 (fixed by #74), #401: a restart between the attach and the datastore "
        "update lost the ENI for good. Every profile builds its ENI list at start-up from "
        "what is attached (IMDS or Describe), so it adopts the ENI and holds; a build that "
        "trusts only its checkpoint leaks it and runs out of ENIs.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    ctx.step("2 peers on node 1")
    fired = crash_while_adding(ctx, NODE, "AttachNetworkInterface", ctx.eni_capacity + 2)
    eni = fired.get("eni")
    iid = ctx.instance_id(NODE)

    def settled() -> str | None:
        """What became of the ENI: used by a pod of the node, or gone from EC2."""
        e = ctx.ec2_eni(eni)
        if e is None:
            return "deleted"
        if e.instance_id == iid and any(p.ip in e.ips for p in ctx.pods_on(NODE)):
            return "used"
        return None

    # New pods until one lands on the ENI (or the build deleted it).
    def where() -> dict:
        e = ctx.ec2_eni(eni)
        return {"attached to": e.instance_id if e else None}

    settles_after_crash(ctx, NODE, eni, settled, "the ENI", where)
