"""CNI ADD/DEL latency: cnikit-cni (with its daemon) against the reference ptp + host-local,
side by side in one run, each executed as a runtime does (env + stdin) from inside the
same node namespace. Prints one JSON object; progress on stderr.

Goal (issue 5): ADD median <= 1.5x ptp's, DEL median no slower than ptp's.
IPv6 (issue 40): the daemon in its IPv6 mode against ptp + host-local on an IPv6 subnet,
side by side in one run; goal: ADD median <= 0.6x ptp's IPv6 ADD, measured with the IPv4
egress the VPC CNI gives every IPv6 pod (v4if0, a second veth) and, for reference, without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PTP_DIR = "/usr/lib/cni"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(xs):
    return {"median_ms": round(statistics.median(xs), 2), "p99_ms": round(pct(xs, 99), 2),
            "min_ms": round(min(xs), 2), "n": len(xs)}


def run_plugin(binary, cni_path, command, conf, cid, netns, name):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
           "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": cni_path,
           "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={name}"}
    data = json.dumps(conf).encode()
    t0 = time.perf_counter()
    p = subprocess.run([binary], input=data, env=env, capture_output=True)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise RuntimeError(f"{binary} {command} {cid}: {p.stdout.decode()[:300]} {p.stderr.decode()[:300]}")
    return ms


def pod_namespaces(rid: str, n: int) -> list[tuple[str, int, str]]:
    """(kind, i, netns path) for n pods of each plugin, interleaved ("c" cnikit, "p" ptp),
    named as the run's pods so that cleanup knows them."""
    from cnikit.fabric import netns

    out = []
    for i in range(n):
        for kind in ("c", "p"):
            name = f"ck-{rid}-n0-b{kind}{i}"
            os.close(netns.create(name))
            out.append((kind, i, f"/run/netns/{name}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="30 pods instead of 100")
    ap.add_argument("--pods", type=int, default=None)
    ap.add_argument("--no-ipv6", action="store_true", help="the IPv4 leg alone")
    opts = ap.parse_args()
    n = opts.pods or (30 if opts.quick else 100)
    if os.geteuid() != 0:
        print(json.dumps({"bench": "cni", "error": "needs root (network namespaces)", "goal_met": False}))
        return 0
    if not Path(PTP_DIR, "ptp").exists():
        print(json.dumps({"bench": "cni", "error": f"{PTP_DIR}/ptp missing", "goal_met": False}))
        return 0

    from cnikit.cluster import CniCluster
    from cnikit.fabric import netns
    from cnikit.plugin.launcher import write_launcher

    env = {"MINIMUM_IP_TARGET": str(n + 10), "WARM_IP_TARGET": "5"}
    log(f"bench_cni: {n} pods per plugin; starting EC2, IMDS, fabric, daemon")
    with CniCluster(nodes=1, profile="hardened", instance_type="m5.4xlarge", scale=0.1, env=env) as c:
        # A warmed node, as the bench measures the plugin path, not EC2's.
        end = time.monotonic() + 60
        while not (c.status(0)["withinTargets"] and c.status(0)["stats"]["available"] >= n):
            if time.monotonic() > end:
                raise SystemExit("daemon pool never warmed up")
            time.sleep(0.1)
        node = c.fabric.nodes[0]
        rid = c.fabric.rid
        cnikit_bin = str(c.bin_dir / "cnikit-cni")
        build = "compiled" if Path(cnikit_bin).read_bytes()[:4] == b"\x7fELF" else "python"
        # host-local keeps its leases here; gone with the bench, like the pod namespaces.
        tmpdir = tempfile.TemporaryDirectory(prefix="bench-cni-")
        tmp = tmpdir.name
        pods = []
        try:
            ptp_conf = {"cniVersion": "1.0.0", "name": "bench-ptp", "type": "ptp", "ipMasq": False,
                        "ipam": {"type": "host-local", "subnet": "10.244.0.0/16", "dataDir": tmp}}
            ck_conf = c.netconf(0)
            pods += pod_namespaces(rid, n)
            lat = {"cnikit": {"ADD": [], "DEL": []}, "ptp": {"ADD": [], "DEL": []}}
            # Run from inside the node namespace (children inherit this thread's namespace).
            with netns.entered(node.ns.fd):
                for command in ("ADD", "DEL"):
                    for kind, i, path in pods:
                        if kind == "c":
                            ms = run_plugin(cnikit_bin, str(c.bin_dir), command, ck_conf, f"ck{i}", path, f"c{i}")
                            lat["cnikit"][command].append(ms)
                        else:
                            ms = run_plugin(f"{PTP_DIR}/ptp", PTP_DIR, command, ptp_conf, f"ptp{i}", path, f"p{i}")
                            lat["ptp"][command].append(ms)
                    log(f"  {command}: cnikit median {statistics.median(lat['cnikit'][command]):.1f} ms, "
                        f"ptp median {statistics.median(lat['ptp'][command]):.1f} ms")
                # For reference, the same plugin as Python: through its -IS launcher (what
                # a node gets without Go), and as a console script as pip writes it (this
                # Python with site), which `make setup` replaces.
                script = Path(tmp) / "cnikit-cni-console"
                script.write_text(f"#!{sys.executable}\nimport sys\n"
                                  "from cnikit.plugin.main import main\nsys.exit(main())\n")
                script.chmod(0o755)
                python = write_launcher(tmp, "cnikit-cni-py", build="python")
                refs = {"python": [], "console": []}
                for kind, i, path in pods[: 2 * min(n, 20)]:
                    if kind != "c":
                        continue
                    for ref, binary in (("python", python), ("console", script)):
                        cid = f"{ref[:2]}{i}"
                        refs[ref].append(run_plugin(str(binary), str(c.bin_dir), "ADD", ck_conf,
                                                    cid, path, cid))
                        run_plugin(str(binary), str(c.bin_dir), "DEL", ck_conf, cid, path, cid)
        finally:
            for _, _, path in pods:
                netns.remove(Path(path).name)
            tmpdir.cleanup()

    ck, pt = lat["cnikit"], lat["ptp"]
    add_ratio = statistics.median(ck["ADD"]) / statistics.median(pt["ADD"])
    del_ratio = statistics.median(ck["DEL"]) / statistics.median(pt["DEL"])
    out = {
        "bench": "cni",
        "pods": n,
        "cnikit_cni": {"ADD": summary(ck["ADD"]), "DEL": summary(ck["DEL"])},
        "ptp_host_local": {"ADD": summary(pt["ADD"]), "DEL": summary(pt["DEL"])},
        "cnikit_build": build,
        "cnikit_python_launcher_add": summary(refs["python"]) if refs["python"] else None,
        "cnikit_console_script_add": summary(refs["console"]) if refs["console"] else None,
        "add_median_ratio": round(add_ratio, 3),
        "del_median_ratio": round(del_ratio, 3),
        "goal": "cnikit-cni ADD median <= 1.5x ptp's and DEL median <= ptp's",
        "goal_met": add_ratio <= 1.5 and del_ratio <= 1.0,
    }
    if not opts.no_ipv6:
        out["ipv6"] = ipv6_leg(n)
        out["goal_met"] = out["goal_met"] and out["ipv6"]["goal_met"]
    print(json.dumps(out))
    return 0


def ipv6_leg(n: int) -> dict:
    """IPv6 pods: cnikit-cni with its daemon in IPv6 mode (with and without IPv4 egress)
    against ptp + host-local handing out addresses of an IPv6 /64, interleaved pod by pod."""
    from cnikit.cluster import CniCluster
    from cnikit.fabric import netns

    lat: dict[str, dict[str, list[float]]] = {}
    for egress in ("true", "false"):
        log(f"bench_cni ipv6: {n} pods per plugin, IPv4 egress {egress}")
        with CniCluster(nodes=1, profile="hardened", scale=0.1, ip_family="ipv6",
                        env={"ENABLE_V4_EGRESS": egress}) as c:
            node, rid = c.fabric.nodes[0], c.fabric.rid
            cnikit_bin = str(c.bin_dir / "cnikit-cni")
            tmpdir = tempfile.TemporaryDirectory(prefix="bench-cni6-")
            pods = []
            try:
                ptp_conf = {"cniVersion": "1.0.0", "name": "bench-ptp6", "type": "ptp",
                            "ipMasq": False, "ipam": {"type": "host-local", "dataDir": tmpdir.name,
                                                      "subnet": "fd00:cafe::/64"}}
                ck_conf = c.netconf(0)
                pods += pod_namespaces(rid, n)
                mine = f"cnikit-egress-{egress}"
                got = lat.setdefault(mine, {"ADD": [], "DEL": []})
                ptp = lat.setdefault("ptp", {"ADD": [], "DEL": []})
                with netns.entered(node.ns.fd):
                    for command in ("ADD", "DEL"):
                        for kind, i, path in pods:
                            if kind == "c":
                                got[command].append(run_plugin(cnikit_bin, str(c.bin_dir), command,
                                                               ck_conf, f"ck{i}", path, f"c{i}"))
                            elif egress == "true":  # ptp measured once, beside the default
                                ptp[command].append(run_plugin(f"{PTP_DIR}/ptp", PTP_DIR, command,
                                                               ptp_conf, f"ptp{i}", path, f"p{i}"))
                        log(f"  {command}: cnikit median {statistics.median(got[command]):.1f} ms"
                            + (f", ptp median {statistics.median(ptp[command]):.1f} ms"
                               if ptp[command] else ""))
            finally:
                for _, _, path in pods:
                    netns.remove(Path(path).name)
                tmpdir.cleanup()
    ptp_add = statistics.median(lat["ptp"]["ADD"])
    ratio = statistics.median(lat["cnikit-egress-true"]["ADD"]) / ptp_add
    return {
        **{k: {"ADD": summary(v["ADD"]), "DEL": summary(v["DEL"])} for k, v in lat.items()},
        "add_median_ratio": round(ratio, 3),
        "add_median_ratio_no_egress": round(
            statistics.median(lat["cnikit-egress-false"]["ADD"]) / ptp_add, 3),
        "goal": "IPv6 ADD median (with IPv4 egress) <= 0.6x ptp's IPv6 ADD",
        "goal_met": ratio <= 0.6,
    }


if __name__ == "__main__":
    sys.exit(main())
