"""A minimal CNI plugin over `cnikit.fabric.wiring`, for tests of the runtime side.

The pod's IP comes from the config (`"ipam": {"addresses": [{"address": "10.0.1.7/32"}]}`)
or from CNI_ARGS `IP=10.0.1.7`; `"deviceIndex": N` and `"router"` select a secondary ENI.
Run as a plugin binary through a wrapper: `exec python -m cnikit.fabric.static_plugin`.
Errors are CNI error JSON on stdout with exit code 1, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys


def _args() -> dict[str, str]:
    out = {}
    for part in os.environ.get("CNI_ARGS", "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def _fail(code: int, msg: str, version: str = "1.0.0") -> int:
    print(json.dumps({"cniVersion": version, "code": code, "msg": msg}))
    return 1


def main() -> int:
    from cnikit.fabric import wiring
    from cnikit.fabric.netlink import Netlink, NetlinkError

    try:
        conf = json.loads(sys.stdin.read() or "{}")
    except ValueError as e:
        return _fail(6, f"config is not JSON: {e}")
    version = conf.get("cniVersion", "1.0.0")
    cmd = os.environ.get("CNI_COMMAND", "")
    netns_path = os.environ.get("CNI_NETNS", "")
    ifname = os.environ.get("CNI_IFNAME", "eth0")
    cid = os.environ.get("CNI_CONTAINERID", "")
    if cmd == "VERSION":
        print(json.dumps({"cniVersion": version, "supportedVersions": ["0.4.0", "1.0.0"]}))
        return 0
    if not cid:
        return _fail(4, "CNI_CONTAINERID is required", version)
    addrs = (conf.get("ipam") or {}).get("addresses") or []
    ip = _args().get("IP") or (addrs[0]["address"].split("/")[0] if addrs else None)
    veth = wiring.host_veth_name(netns_path, cid)
    device_index = int(conf.get("deviceIndex", 0))
    node = Netlink()
    try:
        if cmd == "ADD":
            if not ip:
                return _fail(7, "no IP: set ipam.addresses or CNI_ARGS IP=", version)
            if not netns_path or not os.path.exists(netns_path):
                return _fail(4, f"CNI_NETNS {netns_path!r} does not exist", version)
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            pod = wiring.netlink_in(fd)
            try:
                w = wiring.wire(node, pod, fd, ip, veth, ifname=ifname, device_index=device_index,
                                router=conf.get("router"))
            finally:
                pod.close()
                os.close(fd)
            print(json.dumps({
                "cniVersion": version,
                "interfaces": [{"name": w.host_veth, "mac": w.host_mac},
                               {"name": ifname, "mac": w.pod_mac, "sandbox": netns_path}],
                "ips": [{"address": f"{ip}/32", "interface": 1, "gateway": wiring.POD_GATEWAY}],
                "routes": [{"dst": "0.0.0.0/0", "gw": wiring.POD_GATEWAY}],
            }))
            return 0
        if cmd == "DEL":
            if ip:
                wiring.unwire(node, ip, veth, None)
            else:
                node.link_del(name=veth)
            return 0
        if cmd == "CHECK":
            return 0
        return _fail(4, f"unknown CNI_COMMAND {cmd!r}", version)
    except NetlinkError as e:
        return _fail(11, str(e), version)
    finally:
        node.close()


if __name__ == "__main__":
    sys.exit(main())
