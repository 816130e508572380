"""Daemon start-to-ready time under the `process` runtime and under `podman`, side by side.

One node of a real cluster (moto + gate, fault IMDS, fabric); its daemon is stopped and then
started again and again on the same state directory, alternating the runtimes so both see
the same machine load. Start-to-ready is from `start()` (for podman: `podman run`, with the
cached image) until the daemon's ready marker exists and its socket answers. Also reported:
the image check (content hash + `podman image exists`) and a cold image build when one was
needed, stop time, and `podman run` alone. Prints one JSON object; progress on stderr.

Goal (issue 7): the container adds under 1 s to start-to-ready (median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_S = 1.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def summary(xs):
    return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3),
            "max_s": round(max(xs), 3), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 starts per runtime instead of 10")
    args = ap.parse_args()
    rounds = 3 if args.quick else 10
    out = {"bench": "runtime", "goal": f"podman start-to-ready adds < {GOAL_S} s (median)"}
    if os.geteuid() != 0:
        print(json.dumps({**out, "skipped": "needs root (network namespaces)"}))
        return 0
    from cnikit.containers.podman import Podman

    reason = Podman.available()
    if reason:
        print(json.dumps({**out, "skipped": reason}))
        return 0

    from cnikit.cluster import CniCluster
    from cnikit.containers import image
    from cnikit.containers.noderuntime import make_daemon

    t = time.monotonic()
    built = not Podman().image_exists(image.image_ref())
    image.ensure_image(log=log)
    out["image_build_s" if built else "image_cached_check_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    image.ensure_image()
    out["image_check_s"] = round(time.monotonic() - t, 3)

    times = {"process": [], "podman": []}
    stops = {"process": [], "podman": []}
    with CniCluster(nodes=1, profile="hardened", scale=0.1) as c:
        base = c.daemons[0]
        env = dict(base.env)
        base.stop()
        node = c.fabric.nodes[0]
        for i in range(rounds):
            for rt in ("process", "podman"):
                d = make_daemon(rt, base.state_dir, env=env, netns=node.ns.path, run_id=c.fabric.rid)
                d.on_start = c._record
                t0 = time.monotonic()
                d.start(wait=0)
                d.wait_ready(60)
                times[rt].append(time.monotonic() - t0)
                t0 = time.monotonic()
                d.stop()
                stops[rt].append(time.monotonic() - t0)
                log(f"round {i + 1}/{rounds} {rt}: ready in {times[rt][-1]:.3f}s, "
                    f"stopped in {stops[rt][-1]:.3f}s")
        base.start(wait=60)
    out["start_to_ready"] = {rt: summary(xs) for rt, xs in times.items()}
    out["stop"] = {rt: summary(xs) for rt, xs in stops.items()}
    added = statistics.median(times["podman"]) - statistics.median(times["process"])
    out["podman_adds_s"] = round(added, 3)
    out["met"] = added < GOAL_S
    out["note"] = "2-core machine shared with other runs: figures are noisy"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
