"""Helpers the scenarios share: peers across the fabric, pod churn."""

from __future__ import annotations

from cnikit.scenarios.engine import Ctx


def peers(ctx: Ctx, node: int = 1, count: int = 2) -> list:
    """Pods on another node. Same-node pod traffic never leaves the node; traffic between
    nodes crosses the VPC fabric, which routes by EC2's assignments: an IP EC2 no longer
    gives the pod's node goes dark there, as it does on AWS. No fault is active yet: a pod
    without an IP is the build's liveness violation."""
    return [ctx.require_pod(node) for _ in range(count)]


def fill(ctx: Ctx, node: int, count: int) -> list:
    """Pods on a node with room in EC2 and no fault active: each must get an IP."""
    return [ctx.require_pod(node) for _ in range(count)]


def churn(ctx: Ctx, nodes: list[int], cycles: int, max_pods: int = 8, retry_for: float = 10.0,
          between=None) -> None:
    """Seeded pod churn: each cycle adds a pod or deletes one (chosen by ctx.rng)."""
    for i in range(cycles):
        node = ctx.rng.choice(nodes)
        mine = ctx.pods_on(node)
        if mine and (len(mine) >= max_pods or ctx.rng.random() < 0.45):
            ctx.delete_pod(ctx.rng.choice(mine))
        else:
            ctx.add_pod(node, retry_for=retry_for)
        if between is not None:
            between(i)
