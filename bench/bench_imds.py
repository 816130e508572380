"""Benchmark: fault_imds requests/s and p99 for `network/interfaces/macs/<mac>/local-ipv4s`
with IMDSv2, 8 concurrent clients, side by side with moto's own metadata endpoint, and the
same on `.../ipv6s` of the same dual-stack instance (10 IPv4 and 10 IPv6 addresses): the
VPC CNI's IPv6 mode reads that instead. The two are measured in ABBA order (IPv4, IPv6,
IPv6, IPv4) so that a machine getting busier or quieter meanwhile weighs on both alike;
`ipv6_vs_ipv4_rps` is their throughput ratio (goal: within 10%).

Moto's endpoint serves fixed values and answers 500 under `network/interfaces/macs/`, so it
is benched on a path it does answer (`latest/meta-data/instance-id`), also with a token
(it hands out a fixed one). Each client is its own process (one keep-alive connection,
closed loop: the next request leaves when the answer is in); the servers run in this
process, fault_imds following EC2 (moto behind the gate, polled every 100 ms) meanwhile.

    .venv/bin/python bench/bench_imds.py [--quick] [--clients 8] [--seconds 8]

Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_RPS = 2000
GOAL_P99_MS = 10.0
GOAL_IPV6_RATIO = 0.9  # IPv6 throughput at least 90% of IPv4's
ADDRESSES = 10  # per family, on the benched ENI


def worker(url: str, path: str, seconds: float, instance_id: str, start_at: float) -> None:
    """One client: PUT a token, then GET `path` with it until time is up. Prints JSON."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    base = {"X-Cnikit-Instance-Id": instance_id} if instance_id else {}
    conn.request("PUT", "/latest/api/token",
                 headers={**base, "X-aws-ec2-metadata-token-ttl-seconds": "21600"})
    resp = conn.getresponse()
    token = resp.read().decode()
    assert resp.status == 200, resp.status
    headers = {**base, "X-aws-ec2-metadata-token": token}
    while time.time() < start_at:  # all clients start together
        time.sleep(0.001)
    lat: list[float] = []
    errors = 0
    clock = time.perf_counter
    end = clock() + seconds
    while True:
        t0 = clock()
        if t0 >= end:
            break
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                errors += 1
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        lat.append(clock() - t0)
    print(json.dumps({"lat": lat, "errors": errors}))


def run_clients(url: str, path: str, clients: int, seconds: float, instance_id: str) -> dict:
    return summary(*measure(url, path, clients, seconds, instance_id), seconds)


def measure(url: str, path: str, clients: int, seconds: float,
            instance_id: str) -> tuple[list[float], int]:
    """Every request's latency (s) and the error count, from `clients` processes."""
    start_at = time.time() + 1.0  # time for every process to start and get its token
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, path, str(seconds), instance_id or "",
             str(start_at)],
            stdout=subprocess.PIPE, text=True,
        )
        for _ in range(clients)
    ]
    lat: list[float] = []
    errors = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 60)
        if p.returncode != 0:
            raise RuntimeError(f"bench client failed (exit {p.returncode})")
        data = json.loads(out)
        lat.extend(data["lat"])
        errors += data["errors"]
    return lat, errors


def summary(lat: list[float], errors: int, seconds: float) -> dict:
    lat = sorted(lat)
    n = len(lat)

    def pct(q: float) -> float:
        return round(lat[min(n - 1, int(q * n))] * 1000, 3) if n else 0.0

    return {
        "requests": n,
        "errors": errors,
        "rps": round(n / seconds, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(lat[-1] * 1000, 3) if n else 0.0,
    }


def dual_stack_instance(ec2) -> tuple[str, str]:
    """One instance in a dual-stack subnet, its primary ENI holding ADDRESSES addresses of
    each family: (instance id, MAC)."""
    from cnikit.cloud.cloud import DEFAULT_AMI

    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]["VpcId"]
    vpc = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
    block = ipaddress.IPv6Network(vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"])
    subnet64 = next(block.subnets(new_prefix=64))
    subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.1.0/24",
                                  Ipv6CidrBlock=str(subnet64),
                                  AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    inst = ec2.run_instances(ImageId=DEFAULT_AMI, MinCount=1, MaxCount=1,
                             InstanceType="m5.large", SubnetId=subnet_id)["Instances"][0]
    eni = inst["NetworkInterfaces"][0]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                    SecondaryPrivateIpAddressCount=ADDRESSES - 1)
    ec2.assign_ipv6_addresses(NetworkInterfaceId=eni["NetworkInterfaceId"],
                              Ipv6Addresses=[str(subnet64[0x100 + i]) for i in range(ADDRESSES)])
    return inst["InstanceId"], eni["MacAddress"]


def main() -> int:
    ap = argparse.ArgumentParser(description="fault_imds throughput and latency")
    ap.add_argument("--quick", action="store_true", help="2 s per target instead of 8")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--poll-interval", type=float, default=None,
                    help="EC2 poll interval of the IMDS (default: the server's)")
    args = ap.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 8.0)

    from cnikit.cloud import Cloud
    from fault_imds.server import ImdsServer

    load_before = os.getloadavg()[0]

    log = lambda msg: print(f"bench_imds: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    cloud = Cloud.start(ec2="moto")
    try:
        iid, mac = dual_stack_instance(cloud.client())
        extra = {"poll_interval": args.poll_interval} if args.poll_interval else {}
        with ImdsServer(ec2_endpoint=cloud.endpoint, instance_id=iid, **extra) as imds:
            base = f"/latest/meta-data/network/interfaces/macs/{mac}/"
            legs: dict[str, tuple[list[float], int]] = {"ipv4": ([], 0), "ipv6": ([], 0)}
            for family in ("ipv4", "ipv6", "ipv6", "ipv4"):
                path = base + ("local-ipv4s" if family == "ipv4" else "ipv6s")
                log(f"fault_imds {path}, {args.clients} clients, {seconds:g} s")
                lat, errors = measure(imds.url, path, args.clients, seconds, iid)
                log(f"fault_imds {family}: {summary(lat, errors, seconds)}")
                legs[family] = (legs[family][0] + lat, legs[family][1] + errors)
            ours = summary(*legs["ipv4"], 2 * seconds)
            ipv6 = summary(*legs["ipv6"], 2 * seconds)
            path = base + "local-ipv4s"
            # The same with faults active: a stale on this MAC (content: precomputed) and an
            # error on another path (request stage: evaluated for every request).
            from fault_imds.client import FaultClient

            fc = FaultClient(imds.control_url)
            fc.stale(mac=mac)
            fc.error(path="*/instance-id", probability=0.5)
            faulted = run_clients(imds.url, path, args.clients, seconds, iid)
            log(f"fault_imds with faults: {faulted}")
            polls = imds.ec2.polls
        moto_path = "/latest/meta-data/instance-id"
        log(f"moto {moto_path}, {args.clients} clients, {seconds:g} s")
        moto = run_clients(cloud.upstream_url, moto_path, args.clients, seconds, "")
        log(f"moto: {moto}")
    finally:
        cloud.stop()

    ratio = round(ipv6["rps"] / ours["rps"], 3) if ours["rps"] else 0.0
    met = (ours["rps"] >= GOAL_RPS and ours["p99_ms"] < GOAL_P99_MS and ours["errors"] == 0
           and ipv6["errors"] == 0 and ratio >= GOAL_IPV6_RATIO)
    print(json.dumps({
        "bench": "imds",
        "clients": args.clients,
        "seconds": seconds,
        "fault_imds": {"path": "latest/meta-data/network/interfaces/macs/<mac>/local-ipv4s",
                       "imdsv2": True, **ours, "ec2_polls_meanwhile": polls},
        "fault_imds_ipv6": {"path": "latest/meta-data/network/interfaces/macs/<mac>/ipv6s",
                            "imdsv2": True, **ipv6},
        "ipv6_vs_ipv4_rps": ratio,
        "fault_imds_with_faults": {"faults": ["stale on the MAC", "error p=0.5 on */instance-id"],
                                   **faulted},
        "moto_metadata": {"path": moto_path.lstrip("/"), "imdsv2": True,
                          "note": "moto serves fixed values and 500s on network/interfaces/macs/",
                          **moto},
        "goal": {"rps": GOAL_RPS, "p99_ms": GOAL_P99_MS, "ipv6_vs_ipv4_rps": GOAL_IPV6_RATIO},
        "met": met,
        "cpus": os.cpu_count(),
        # Other work on the machine shows up in p99 first: the 1-minute load, before/after.
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, path, seconds, iid, start_at = sys.argv[2:7]
        worker(url, path, float(seconds), iid, float(start_at))
        sys.exit(0)
    sys.exit(main())
