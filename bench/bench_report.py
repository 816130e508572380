"""Report writing time for a long, busy run: a synthetic history of N seconds with pod churn,
ownership changes, daemon views, IMDS changes and prober stats (shapes as cnikit.check writes
them). Prints one JSON object; progress on stderr.

    .venv/bin/python bench/bench_report.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time

from cnikit.check.history import History
from cnikit.report import write_report

GOAL_S = 5.0  # a 10-minute chaos run's report in under 5 s


def synthetic(seconds: int, nodes: int = 3, seed: int = 1) -> dict:
    rng = random.Random(seed)
    h = History()
    t0 = 1_800_000_000.0
    owners: dict[str, list] = {}
    enis = {n: [f"eni-{n}{k}" for k in range(3)] for n in range(nodes)}
    free = [f"10.0.{n // 250}.{n % 250 + 4}" for n in range(2000)]
    for n in range(nodes):
        for eni in enis[n]:
            for _ in range(5):
                owners[free.pop()] = [f"i-{n}", eni, False]
    h.append("monitor", "info", "ownership", {"version": 0, "full": True, "set": dict(owners),
                                              "unset": [], "prefixes_set": {}, "prefixes_unset": []},
             at=t0)
    pods: dict[str, dict] = {}
    events = []
    seq = 0
    for s in range(seconds):
        t = t0 + s
        for k in range(10):
            h.append("prober", "info", "stats", {"stale": []}, at=t + k / 10)
        if rng.random() < 0.5:  # an IP comes or goes
            if rng.random() < 0.5 and free:
                n = rng.randrange(nodes)
                ip = free.pop()
                owners[ip] = [f"i-{n}", rng.choice(enis[n]), False]
                ch = {"set": {ip: owners[ip]}, "unset": []}
            else:
                ip = rng.choice(sorted(owners))
                owners.pop(ip)
                free.append(ip)
                ch = {"set": {}, "unset": [ip]}
            h.append("monitor", "info", "ownership", {"version": s + 1, "full": False, **ch,
                                                      "prefixes_set": {}, "prefixes_unset": []},
                     at=t + 0.3)
            for eni in {o[1] for o in owners.values()}:
                seq += 1
                events.append({"seq": seq, "time": t + 0.35, "type": "served",
                               "instance_id": f"i-{eni[4]}", "mac": eni, "eni_id": eni,
                               "entry": "local-ipv4s", "present": True,
                               "values": sorted(ip for ip, o in owners.items() if o[1] == eni)})
        for n in range(nodes):
            h.append("monitor", "info", "daemon-view", {"instance_id": f"i-{n}", "ips": sorted(
                ip for ip, o in owners.items() if o[0] == f"i-{n}")}, at=t + 0.5)
        if rng.random() < 0.3:
            ip = rng.choice(sorted(owners))
            name = f"p{s}"
            pods[name] = {"pod": name, "node": 0, "instance_id": owners[ip][0], "ip": ip}
            h.append("client", "ok", "pod-add", pods[name], at=t + 0.6)
        if rng.random() < 0.2 and pods:
            name = rng.choice(sorted(pods))
            h.append("client", "ok", "pod-delete", {"pod": name, "ip": pods.pop(name)["ip"]},
                     at=t + 0.7)
    return {"scenario": "bench", "profile": "hardened", "seed": seed, "history": h,
            "imds_events": events, "audit": []}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    seconds = 60 if args.quick else 600
    print(f"building a {seconds}s history", file=sys.stderr)
    result = synthetic(seconds)
    n = len(result["history"])
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        paths = write_report(d, result)
        took = time.perf_counter() - start
        size_html = paths["html"].stat().st_size
        size_json = paths["json"].stat().st_size
    out = {"area": "report", "history_entries": n, "imds_events": len(result["imds_events"]),
           "run_seconds": seconds, "write_report_s": round(took, 3),
           "html_kb": size_html // 1024, "json_kb": size_json // 1024,
           "goal": f"a {seconds}s run's report in < {GOAL_S}s", "met": took < GOAL_S}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
