"""Latency of the EC2 gate vs moto alone, side by side in one run.

The server process runs moto and the gate as `Cloud.start()` does (both in-process). The
client is a separate process speaking raw HTTP with keep-alive (urllib3) and the exact
form bodies boto3 sends, so neither the server's GIL nor boto3's own parsing blurs the
figures. Calls alternate moto/gate in each round so background noise hits both alike.

- DescribeNetworkInterfaces of one ENI by id (what ipamd does for its ENIs);
- AssignPrivateIpAddresses with SecondaryPrivateIpAddressCount=1, each followed by an
  Unassign of the address it got (not timed) so state stays bounded.

Goal: the gate adds at most 20% to moto's median. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADERS = {
    "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
    "Authorization": "AWS4-HMAC-SHA256 Credential=test/20261130/us-east-1/ec2/aws4_request, "
                     "SignedHeaders=host, Signature=0",
}
IP_RE = re.compile(rb"<privateIpAddress>([0-9.]+)</privateIpAddress>")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(ms: list[float]) -> dict:
    return {"median_ms": round(statistics.median(ms), 3), "p99_ms": round(percentile(ms, 0.99), 3),
            "calls": len(ms)}


def client(spec: dict) -> dict:
    """Runs in its own process: time the calls, return the raw figures."""
    import urllib3

    pool = {k: urllib3.HTTPConnectionPool("127.0.0.1", int(url.rsplit(":", 1)[1]), maxsize=1)
            for k, url in spec["endpoints"].items()}
    times: dict[str, list[float]] = {f"{op}_{k}": [] for op in ("describe", "assign")
                                     for k in pool}

    def post(target: str, params: dict) -> tuple[float, bytes]:
        body = urlencode({**params, "Version": "2016-11-15"})
        t0 = time.perf_counter()
        r = pool[target].urlopen("POST", "/", body=body, headers=HEADERS)
        elapsed = (time.perf_counter() - t0) * 1000
        if r.status != 200:
            raise RuntimeError(f"{target} {params['Action']}: {r.status} {r.data[:300]!r}")
        return elapsed, r.data

    for n in range(spec["warmup"] + spec["calls"]):
        for target in ("moto", "gate") if n % 2 == 0 else ("gate", "moto"):
            eni = spec["enis"][target]
            ms, _ = post(target, {"Action": "DescribeNetworkInterfaces",
                                  "NetworkInterfaceId.1": eni})
            if n >= spec["warmup"]:
                times[f"describe_{target}"].append(ms)
            before = set(spec["ips"][target])
            ms, data = post(target, {"Action": "AssignPrivateIpAddresses",
                                     "NetworkInterfaceId": eni,
                                     "SecondaryPrivateIpAddressCount": "1"})
            if n >= spec["warmup"]:
                times[f"assign_{target}"].append(ms)
            new = [ip.decode() for ip in IP_RE.findall(data) if ip.decode() not in before]
            if len(new) != 1:
                raise RuntimeError(f"{target}: expected one new address, got {new}")
            post(target, {"Action": "UnassignPrivateIpAddresses", "NetworkInterfaceId": eni,
                          "PrivateIpAddress.1": new[0]})
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 calls per figure instead of 400")
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        print(json.dumps(client(json.loads(args.client))))
        return 0

    calls = args.calls or (100 if args.quick else 400)
    result: dict = {"bench": "gate", "calls_per_figure": calls,
                    "goal": "gate adds at most 20% to moto's median latency",
                    "client": "separate process, raw HTTP keep-alive (urllib3)"}
    result.update(run(calls))
    result["note"] = ("moto and the gate run in one process as Cloud.start() runs them. "
                      "DescribeNetworkInterfaces through the gate is served from its mirror "
                      "(no upstream call); Assign is moto's Assign with explicit addresses plus "
                      "the gate's checks and one more loopback HTTP hop. 2 shared cores: "
                      "figures are noisy.")
    print(json.dumps(result))
    return 0


def run(calls: int) -> dict:
    from cnikit.cloud import Cloud

    print(f"bench_gate: moto + gate, {calls} calls per figure", file=sys.stderr)
    cloud = Cloud.start(ec2="moto")
    try:
        topo = cloud.bootstrap(nodes=2, instance_type="m5.large")
        ec2 = cloud.client()
        enis = {"gate": topo.instances[0].primary_eni_id, "moto": topo.instances[1].primary_eni_id}
        ips = {}
        for target, eni in enis.items():  # a realistic ENI: primary + 5 secondaries
            ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=5)
            ips[target] = cloud.gate.owners().enis[eni].ips
        spec = {"endpoints": {"gate": cloud.endpoint, "moto": cloud.upstream_url},
                "enis": enis, "ips": ips, "calls": calls, "warmup": 20}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--client", json.dumps(spec)],
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        times = json.loads(proc.stdout)
        print(f"bench_gate: client done in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    finally:
        cloud.stop()

    result: dict = {}
    met = True
    for op in ("describe", "assign"):
        moto, gate = summary(times[f"{op}_moto"]), summary(times[f"{op}_gate"])
        overhead = (gate["median_ms"] / moto["median_ms"] - 1) * 100
        met = met and overhead <= 20
        key = {"describe": "DescribeNetworkInterfaces", "assign": "AssignPrivateIpAddresses"}[op]
        result[key] = {"moto": moto, "gate": gate, "median_overhead_pct": round(overhead, 1)}
    result["met"] = met
    return result


if __name__ == "__main__":
    sys.exit(main())
