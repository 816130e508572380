"""The daemon is killed right after EC2 assigned it addresses, before it heard the answer
(upstream #66's window for addresses; the CNI ADD that asked for them never answered).

Node 0 gets pods until the build calls AssignPrivateIpAddresses; the gate kills the daemon
the moment it served that call (a crash point, cnikit.cluster.crash_point). The addresses
are on the node's ENI in EC2 and in no datastore. Restarted, a correct build adopts them
(and its next pods get them) or gives them back to EC2; the ADD in flight is retried and
answered, pods keep working. A build that forgets them leaks them: held in EC2 for no pod,
never used.
"""

from __future__ import annotations

import ipaddress

from cnikit.scenarios.common import crash_while_adding, peers, settles_after_crash
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "crash-after-assign",
    "the daemon is killed right after EC2 assigned it addresses, before it heard the answer",
    why="upstream #66 (fixed by #74), #401: state EC2 changed for a daemon that died before "
        "recording it must be found again at start-up. Every profile reads the ENI's "
        "addresses at start-up (IMDS or Describe) and adopts them, so it holds; a build "
        "that trusts only its checkpoint leaks them for good.",
    nodes=2,
    env={"WARM_IP_TARGET": "2", "MAX_ENI": "2"},
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    ctx.step("2 peers on node 1")
    fired = crash_while_adding(ctx, NODE, "AssignPrivateIpAddresses", ctx.eni_capacity)
    eni = fired.get("eni")
    ok = [r for r in ctx.gate.audit.records() if r.action == "AssignPrivateIpAddresses"
          and r.eni_id == eni and r.outcome == "ok"]
    # The last assign on that ENI before the restart is the crashed one (its daemon was dead
    # until then; the audit log records a call before the after-call hooks run).
    assigned = set(ok[-1].ips) if ok else set()
    prefixes = set(ok[-1].prefixes) if ok else set()  # a build that assigns /28 prefixes
    if not assigned and not prefixes:
        ctx.not_exposed(f"the build's crashed assign on {eni} named no address or prefix")
    nets = [ipaddress.ip_network(p, strict=False) for p in prefixes]

    def settled() -> str | None:
        """What became of the addresses: one held by a pod, or all given back."""
        e = ctx.ec2_eni(eni)
        held = set(e.ips) | set(e.prefixes) if e is not None else set()
        if any(p.ip in assigned or any(ipaddress.ip_address(p.ip) in n for n in nets)
               for p in ctx.pods_on(NODE)):
            return "used"
        if not (assigned | prefixes) & held:
            return "released"
        return None

    # New pods until one gets an address of the crashed assign (or the build released them).
    settles_after_crash(ctx, NODE, eni, settled, "the assigned addresses",
                        lambda: {"addresses": sorted(assigned | prefixes)})
