"""podman as a real CNI client of a node's daemon.

podman 4.3 with `network_backend = "cni"` reads conflists from `network_config_dir` and
executes the plugins it names from `cni_plugin_dirs` (libcni: CNI_COMMAND, CNI_NETNS, ...
and the netconf on stdin), exactly as for its own bridge networks. Here the conflist's one
plugin is `cnikit-cni` pointed at a node's daemon socket, so `podman run --network NAME`
makes a namespace (/run/netns/cni-...), and the daemon allocates a VPC IP for it and wires
it into that node like any pod; `podman rm` runs DEL, which gives the IP back.

    net = PodmanCniNetwork(cluster, node=0).create()
    c = net.run("web")               # -> CniContainer(name, ip, netns)
    net.exec(c, "python3", "-c", ...)
    net.remove(c)
    net.close()                      # removes its containers and the network's files
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from cnikit.containers.podman import CNI_BIN, LABEL_KIT, LABEL_RUN, Podman
from cnikit.errors import EnvironmentProblem

SLEEPER = ["-c", "import signal; signal.sigwait({signal.SIGTERM, signal.SIGINT})"]


@dataclass
class CniContainer:
    name: str
    id: str
    ip: str | None
    netns: str | None


class PodmanCniNetwork:
    def __init__(self, cluster, node: int, name: str | None = None):
        self.cluster = cluster
        self.node = node
        self.rid = cluster.fabric.rid
        self.name = name or f"ck-{self.rid}-n{node}"
        self.dir = Path(cluster.fabric.run.dir) / f"podman-{self.name}"
        self.podman = Podman(net_dir=self.dir / "net.d",
                             plugin_dirs=[str(cluster.bin_dir), CNI_BIN],
                             name=f"cni-{self.rid}-n{node}")
        self.containers: list[CniContainer] = []
        self.image: str | None = None

    def conflist(self) -> dict:
        return {"cniVersion": "1.0.0", "name": self.name,
                "plugins": [{"type": "cnikit-cni",
                             "daemonSocket": str(self.cluster.daemons[self.node].socket_path)}]}

    def create(self) -> PodmanCniNetwork:
        from cnikit.containers.image import ensure_image

        self.podman.require()
        net_dir = self.dir / "net.d"
        net_dir.mkdir(parents=True, exist_ok=True)
        (net_dir / f"{self.name}.conflist").write_text(json.dumps(self.conflist(), indent=2))
        self.image = ensure_image(self.podman)
        networks = self.podman.out("network", "ls", "--format", "{{.Name}}").split()
        if self.name not in networks:
            raise EnvironmentProblem(f"podman does not list the CNI network {self.name}: {networks}")
        return self

    def run(self, name: str, *argv: str) -> CniContainer:
        """Start a container on this network (default: waits for a signal); its VPC IP."""
        cname = f"ck-{self.rid}-{name}"
        cmd = ["run", "-d", "--name", cname, "--network", self.name,
               "--label", f"{LABEL_KIT}=cni-client", "--label", f"{LABEL_RUN}={self.rid}",
               "--entrypoint", "/usr/local/bin/python3", self.image, *(argv or SLEEPER)]
        cid = self.podman.out(*cmd)
        info = self.podman.inspect(cid) or {}
        nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (nets.get(self.name) or {}).get("IPAddress") or None
        netns = (info.get("NetworkSettings") or {}).get("SandboxKey") or None
        c = CniContainer(cname, cid, ip, netns)
        self.containers.append(c)
        return c

    def exec(self, c: CniContainer, *argv: str, timeout: float = 30.0):
        return self.podman.run("exec", c.name, *argv, check=False, timeout=timeout)

    def python(self, c: CniContainer, code: str, timeout: float = 30.0):
        return self.exec(c, "/usr/local/bin/python3", "-c", code, timeout=timeout)

    def remove(self, c: CniContainer) -> None:
        """`podman rm -f`: stops the container and runs CNI DEL for its network."""
        self.podman.run("rm", "-f", "--time", "0", c.name)
        self.containers = [x for x in self.containers if x.name != c.name]

    def close(self) -> None:
        for c in list(self.containers):
            try:
                self.remove(c)
            except EnvironmentProblem:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


ICMP_PING = r"""
import os, socket, struct, sys, time
def csum(b):
    b += b"\0" * (len(b) & 1)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
dst, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.settimeout(timeout)
ident, got = os.getpid() & 0xFFFF, 0
for seq in range(count):
    body = struct.pack("!d", time.time())
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    s.sendto(struct.pack("!BBHHH", 8, 0, csum(hdr + body), ident, seq) + body, (dst, 0))
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data, addr = s.recvfrom(2048)
        except socket.timeout:
            break
        ihl = (data[0] & 15) * 4
        t, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if t == 0 and rid == ident and rseq == seq and addr[0] == dst:
            got += 1
            break
print(got)
"""


def ping_code(dst: str, count: int = 3, timeout: float = 1.0) -> str:
    """Python that pings dst (raw ICMP) and prints how many replies came back."""
    return f"import sys; sys.argv = ['ping', {dst!r}, '{count}', '{timeout}']\n" + ICMP_PING
