"""Upstream issue 1967: an ENI missing from IMDS is force-removed with its pods.

IMDS stops listing a secondary ENI that holds pods (`missing` on its MAC). A reconcile
that trusts IMDS sweeps the ENI out of the datastore, pods and all; when IMDS lists it again
the ENI comes back with every IP free: the pool frees the ENI (detach, delete) or hands its
IPs to new pods, while the old pods still use them.
"""

from __future__ import annotations

from cnikit.scenarios.common import fill, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "imds-missing-eni",
    "upstream 1967: an ENI missing from IMDS is swept from the datastore with its pods",
    why="both upstream profiles trust IMDS in the ENI sweep (not fixed by 1.18.4); hardened "
        "asks EC2, which still has the ENI attached.",
    nodes=2,
)
def run(ctx: Ctx) -> None:
    peers(ctx)
    # WARM_ENI_TARGET=1 fills the primary ENI first; pods spill onto the warm ENI.
    fill(ctx, NODE, 9)
    for _ in range(6):
        # The pods' IPs (CNI results) on EC2's secondary ENIs of the node.
        held = ctx.pod_ips(NODE)
        secondary = [e for e in ctx.node_enis(NODE) if e.device_index and held & set(e.ips)]
        if secondary:
            break
        fill(ctx, NODE, 1)
    else:
        ctx.not_exposed("the build kept every pod on the primary ENI: no secondary ENI with "
                        "pods for IMDS to miss")
    eni = secondary[0]
    focus = {"node": NODE, "eni": eni.eni_id, "mac": eni.mac}
    ctx.wait_within_targets(NODE)
    ctx.step("pods on a secondary ENI", **focus)

    missing = ctx.imds_fault("missing", target={"mac": eni.mac})
    ctx.step("IMDS stops listing the ENI", **focus)
    # Two: the daemon reads IMDS for a reconcile before it takes its lock, so the first
    # one counted may still have read IMDS from before the fault.
    ctx.wait_reconciles(NODE, 2)
    ctx.step("reconciles without the ENI in IMDS", **focus)

    ctx.end_imds_fault(missing)
    ctx.wait_reconciles(NODE, 2)
    ctx.step("IMDS lists the ENI again; reconciles", **focus)
    # The pool frees surplus ENIs and IPs after its decrease interval.
    ctx.wait_pool_settles(NODE, 20)
    # Pods keep coming until one gets an address of that ENI (or it is gone, or 12 pods).
    for _ in range(12):
        now = ctx.ec2_eni(eni.eni_id)
        if now is None or now.instance_id is None:
            break
        pod = ctx.add_pod(NODE, retry_for=5)
        if pod is None or pod.ip in now.ips:
            break
    ctx.step("pool settles; new pods", **focus)
