"""Upstream issue 3824 (prefix delegation): a partial IMDS read of `ipv4-prefix` makes the
daemon presume a pod's allocation stale/dead and later release or reuse its in-use /28.

The node's ENI carries two /28 prefixes with pods on both. IMDS leaves one prefix out
(`missing` on that prefix) while the daemon restarts: start-up builds the datastore from
IMDS without that prefix, and the checkpointed allocations in it are dropped as stale.
The reconcile then finds the prefix in EC2 and adds it back, every address free: the pool
releases the /28 to EC2 or hands its addresses to new pods.
"""

from __future__ import annotations

import ipaddress

from cnikit.scenarios.common import fill, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0


@scenario(
    "prefix-partial-read",
    "upstream 3824: a partial IMDS prefix read drops in-use allocations; the /28 is reused",
    why="both upstream profiles take IMDS prefix reads at face value at start-up and drop "
        "checkpointed pods outside them; hardened reads EC2.",
    nodes=2,
    env={"ENABLE_PREFIX_DELEGATION": "true", "WARM_PREFIX_TARGET": "1", "MAX_ENI": "1"},
)
def run(ctx: Ctx) -> None:
    peers(ctx)
    eni = ctx.node_enis(NODE)[0]
    focus = {"node": NODE, "eni": eni.eni_id, "mac": eni.mac, "entry": "ipv4-prefix"}
    pods = fill(ctx, NODE, 18)  # one /28 full, pods on a second one
    ctx.wait_within_targets(NODE)
    by_prefix: dict[str, int] = {}
    for p in ctx.ec2_eni(eni.eni_id).prefixes:
        net = ipaddress.ip_network(p)
        by_prefix[p] = sum(ipaddress.ip_address(q.ip) in net for q in pods)
    held = [p for p, n in by_prefix.items() if n]
    if len(held) < 2:
        ctx.not_exposed(f"the build holds no pods on two /28 prefixes (EC2 shows "
                        f"{by_prefix or 'no prefix'})")
    target = min(held, key=lambda p: by_prefix[p])
    ctx.step(f"pods on {len(held)} prefixes", **focus)

    ctx.wait_imds_follows(NODE, eni.eni_id)
    partial = ctx.imds_fault("missing", target={"mac": eni.mac, "ips": [target]})
    ctx.step(f"IMDS serves ipv4-prefix without {target}", **focus)
    ctx.restart_daemon(NODE)
    ctx.step("daemon restarted during the partial read", **focus)
    ctx.end_imds_fault(partial)
    # Two: the first reconcile counted may have read IMDS before the fault ended.
    ctx.wait_reconciles(NODE, 2)
    ctx.step("reconciles (IMDS complete again)", **focus)
    ctx.wait_pool_settles(NODE, 20)
    # Pods keep coming until the daemon hands out an address of that /28 (or 20 pods).
    net = ipaddress.ip_network(target)
    for _ in range(20):
        pod = ctx.add_pod(NODE, retry_for=5)
        if pod is None or ipaddress.ip_address(pod.ip) in net:
            break
    ctx.step(f"pool settles; new pods until one gets an address of {target}", **focus)
