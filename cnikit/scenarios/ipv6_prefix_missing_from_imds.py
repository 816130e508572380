"""Upstream issue 3824's class in IPv6 mode: IMDS leaves the node's /80 out of
`ipv6-prefix` while the daemon restarts and pods come and go.

In IPv4 prefix delegation a partial `ipv4-prefix` read made upstream presume the pods of
the missing /28 stale and later release or reuse it (prefix-partial-read). In IPv6 mode
the node's pods all live in one /80 on the primary ENI. Upstream's start-up takes it from
EC2 (DescribeNetworkInterfaces' Ipv6Prefixes) and only logs what IMDS's `ipv6-prefix`
says, so it holds. A build that takes IMDS's word at start-up, or in a periodic pass, sees
no /80: it drops its checkpointed pods and hands their addresses out again (`shared-ip`),
assigns a new /80 and leaves them behind, or releases the /80 under them (`ip-not-owned`,
`unreachable`).

A build that never asks IMDS for `ipv6-prefix` cannot be misled by it: the fault reaches
nothing (the request log ties it to the build's requests for that entry) and the run
holds "not exposed".
"""

from __future__ import annotations

import ipaddress
import time

from cnikit.scenarios.common import fill, peers
from cnikit.scenarios.engine import Ctx, scenario

NODE = 0
ENTRY = "ipv6-prefix"


@scenario(
    "ipv6-prefix-missing-from-imds",
    "IPv6 mode: IMDS leaves the node's /80 out of ipv6-prefix while the daemon restarts "
    "and pods come and go",
    why="every profile's IPv6 start-up takes the /80 from EC2 and only logs IMDS's "
        "ipv6-prefix (upstream's setupENI), and IPv6 mode has no reconcile: all hold. A "
        "build that trusts the IMDS read drops its pods and reuses their addresses "
        "(shared-ip) or releases the /80 under them (ip-not-owned).",
    nodes=2,
    family="ipv6",
)
def run(ctx: Ctx) -> None:
    peers(ctx, node=1, count=2)
    pods = fill(ctx, NODE, 4)
    eni = next((e for e in ctx.node_enis(NODE)
                if any(_within(p.ip, e.ipv6_prefixes) for p in pods)), None)
    if eni is None:
        ctx.not_exposed("the build's pods on node 0 are in no IPv6 prefix of its ENIs: "
                        "no /80 for IMDS to leave out")
    prefix = next(c for c in eni.ipv6_prefixes if any(_within(p.ip, [c]) for p in pods))
    focus = {"node": NODE, "eni": eni.eni_id, "mac": eni.mac, "entry": ENTRY}
    ctx.step(f"4 pods on node 0 in {prefix}", **focus)

    ctx.wait_until(lambda: prefix in (ctx.imds_served(NODE, eni.mac, ENTRY) or ()), 10,
                   f"IMDS to serve {prefix} in {eni.mac}'s {ENTRY}")
    # The node's /80 left out of ipv6-prefix: with one /80 the entry is empty, which IMDS
    # answers 404 (as real IMDS does). Targeted by path, not by address: the request log
    # ties a fault to the requests its instance, MAC and path cover, and so the exposure
    # counts only the build's reads of this entry.
    path = f"latest/meta-data/network/interfaces/macs/{eni.mac}/{ENTRY}"
    gone = ctx.imds_fault("missing", target={"mac": eni.mac, "path": path})
    ctx.wait_until(lambda: ctx.imds_served(NODE, eni.mac, ENTRY) is None, 10,
                   f"IMDS to leave {prefix} out of {ENTRY}")
    ctx.step(f"IMDS serves {ENTRY} without {prefix}", **focus)
    mark = ctx.imds_mark()
    ctx.restart_daemon(NODE)
    ctx.step("daemon restarted while IMDS leaves the /80 out", **focus)

    # Pods come and go while the fault lasts, until the build has read the entry again
    # after its start-up (a build that re-reads it in a periodic pass), or a reconcile
    # interval has passed (one that reads it only at start-up, or never).
    reads = _reader(ctx, mark, path)
    started = reads()
    until = time.monotonic() + max(2.0, ctx.run_seconds(60))
    cycles = 0
    while time.monotonic() < until and reads() < started + 2:
        mine = ctx.pods_on(NODE)
        ctx.delete_pod(ctx.rng.choice(mine))
        for _ in range(2 if len(mine) < 6 else 1):
            ctx.require_pod(NODE)
        cycles += 1
        ctx.run_for(0.2)  # pods come at a runtime's pace, not in a tight loop
    ctx.step(f"{cycles} pod cycles during the fault; the build read {ENTRY} "
             f"{reads()} time(s) since the restart", **focus)
    ctx.end_imds_fault(gone)
    for pod in ctx.pods_on(NODE)[1:3]:
        ctx.delete_pod(pod)
    for _ in range(2):
        ctx.require_pod(NODE)
    ctx.step("IMDS complete again; pods deleted and added", **focus)


def _within(ip: str, prefixes) -> bool:
    a = ipaddress.ip_address(ip)
    return any(a.version == 6 and a in ipaddress.ip_network(p) for p in prefixes)


def _reader(ctx: Ctx, since: int, path: str):
    """A counter of node 0's requests for `path` since the log's position `since`."""
    seen = {"seq": since, "n": 0}

    def count() -> int:
        new, seen["seq"] = ctx.imds_requests(NODE, seen["seq"])
        seen["n"] += sum(1 for q in new if not q.get("observer")
                         and q.get("path", "").lstrip("/") == path)
        return seen["n"]

    return count
