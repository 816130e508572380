"""Upstream issue 3019, replayed step by step as the incident report tells it.

IMDS freezes the node's ENI (`stale` on its MAC). Pods come and go: 4 freed IPs stay listed
in IMDS, new IPs never show up there, until a pod is created and the warm pool adds one
more IP, so `1 + len(datastore) == len(IMDS local-ipv4s)` while the contents differ. A
length-comparing reconcile then trusts IMDS and force-removes the in-use IPs; the next
reconcile (lengths differ, EC2 asked) re-adds them as free; the pool releases them to EC2
or hands them to new pods. The checkers see the pods go dark or share an IP.
"""

from __future__ import annotations

from cnikit.scenarios.common import release, settled
from cnikit.scenarios.engine import Ctx, Precondition, scenario

M = 6  # pods holding IPs that stay common to IMDS and the datastore at first
FREED = 4
NODE = 0


@scenario(
    "imds-stale-equal-length",
    "upstream 3019: stale IMDS with equal lengths makes the reconcile drop in-use IPs",
    why="1.18.3 compares lengths only (the bug); 1.18.4 compares contents and asks EC2; "
        "hardened never removes an address on IMDS evidence.",
    nodes=2,
    env={"WARM_IP_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    ctx.spare_interface()  # what takes released addresses: ready before they are released
    # Peers on the other node: pod traffic across nodes crosses the VPC fabric, which
    # routes by EC2's assignments, so an IP EC2 took back goes dark there.
    pods, eni, focus = settled(ctx, NODE, M)
    ctx.step(f"{M} pods; EC2, IMDS and the datastore agree", **focus)

    ctx.wait_imds_follows(NODE, eni.eni_id)
    stale = ctx.imds_fault("stale", target={"mac": eni.mac})
    frozen = set(ctx.imds_served(NODE, eni.mac) or []) - {eni.primary_ip}
    ctx.step("IMDS stops following the ENI (stale)", **focus)

    # The IP cooldown ends, the pool is over WARM_IP_TARGET: the daemon releases to EC2.
    freed = release(ctx, eni, pods[:FREED], FREED, before=frozen, within=20)
    # A busy subnet: another tenant picks the freed IPs up, so EC2 will not hand them back.
    ctx.ec2_take(freed)
    ctx.step(f"{len(freed)} IPs released to EC2 (and taken by another interface), still listed "
             "in IMDS", **focus)

    for _ in range(FREED - 1):
        if ctx.add_pod(NODE) is None:  # IMDS is stale: a careful build may hold back
            raise Precondition("a pod got an IP while IMDS was stale")
    ctx.wait_within_targets(NODE)
    ctx.step("new pods: their IPs are missing from IMDS", **focus)

    if ctx.add_pod(NODE) is None:
        raise Precondition("a pod got an IP while IMDS was stale")

    def lengths_match():
        # The pool as EC2 has it: the IPs the build assigned itself on the ENI.
        pool = set(ctx.ec2_eni(eni.eni_id).ips) - {eni.primary_ip}
        return len(pool) == len(frozen)

    ctx.design(lengths_match, 15, "the warm pool to make the lengths match")
    ctx.step("a pod created; the warm pool adds an IP: lengths match, contents differ", **focus)

    ctx.wait_reconciles(NODE, 1)
    ctx.step("reconcile", **focus)

    ctx.wait_pool_settles(NODE, 20)  # the pool manager tops up (more warm IPs)
    ctx.step("more warm IPs", **focus)

    ctx.wait_reconciles(NODE, 1)
    ctx.step("reconcile", **focus)

    # Release: the pool shrinks to its target after its decrease interval; new pods take
    # free IPs.
    ctx.wait_pool_settles(NODE, 20)
    for _ in range(2):
        ctx.add_pod(NODE, retry_for=5)
    ctx.end_imds_fault(stale)
    ctx.step("release; IMDS catches up", **focus)
