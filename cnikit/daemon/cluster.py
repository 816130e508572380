"""A live VPC with the reference daemon on every node and pods wired through cnikit-cni.

    with CniCluster(nodes=3, profile="hardened") as c:
        pod = c.add_pod(0, "web-1")
        c.kill_daemon(0, signal.SIGKILL); c.restart_daemon(0)
        c.status(0)          # the daemon's pool, assignments, ENIs

Real parts only: moto behind the EC2 gate, the fault IMDS answering inside the VPC, the
fabric's namespaces, one `cnikit daemon` process per node namespace (its own state dir),
the plugin executed by the fabric's CNI runner as a runtime would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cnikit.daemon.process import DaemonProcess
from cnikit.daemon.server import request


class CniCluster:
    def __init__(self, nodes: int = 3, profile: str = "hardened", instance_type: str = "m5.large",
                 scale: float = 0.1, env: dict[str, str] | None = None, imds_seed: int | None = None,
                 runtime: str | None = None, ec2: str = "moto", ec2_endpoint: str | None = None,
                 seed: int | None = None):
        self.n_nodes = nodes
        self.profile = profile
        self.instance_type = instance_type
        self.scale = scale
        self.env = dict(env or {})
        self.imds_seed = imds_seed
        # process | podman | docker (cnikit.containers.noderuntime); default $CNIKIT_RUNTIME.
        self.runtime = runtime or os.environ.get("CNIKIT_RUNTIME") or "process"
        self.ec2, self.ec2_endpoint, self.seed = ec2, ec2_endpoint, seed
        self.cloud = self.imds = self.fabric = None
        self.topo = None
        self.daemons: list[DaemonProcess] = []
        self.bin_dir: Path | None = None
        self.state_root: Path | None = None

    def start(self) -> CniCluster:
        try:
            self._start_cloud()
            self._start_nodes()
        except BaseException:
            self.close()
            raise
        return self

    def _start_cloud(self) -> None:
        """EC2 (moto embedded, or the upstream chosen), the instances, the fault IMDS."""
        from cnikit.cloud import Cloud
        from fault_imds.server import ImdsServer

        self.cloud = Cloud.start(ec2=self.ec2, endpoint=self.ec2_endpoint, seed=self.seed)
        self.topo = self.cloud.bootstrap(nodes=self.n_nodes, instance_type=self.instance_type)
        self.imds = ImdsServer(ec2_endpoint=self.cloud.endpoint, seed=self.imds_seed).start()

    def _start_nodes(self) -> None:
        """The fabric for self.topo, the plugin launcher and one daemon per node."""
        from cnikit.fabric.topology import Fabric
        from cnikit.plugin.launcher import write_launcher

        self.fabric = Fabric(self.cloud, self.topo, imds=self.imds).start()
        self.bin_dir = write_launcher(self.fabric.run.dir / "cni-bin").parent
        self.state_root = state_root(self.fabric.rid, self.fabric.run.dir)
        for node in self.fabric.nodes:
            node.daemon = self._daemon(node)
            self.daemons.append(node.daemon)
        for d in self.daemons:
            d.start(wait=0)
        for d in self.daemons:
            d.wait_ready(60)

    def _daemon(self, node) -> DaemonProcess:
        env = {
            "AWS_ENDPOINT_URL_EC2": self.fabric.ec2_endpoint,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": self.fabric.imds_endpoint,
            "AWS_REGION": self.cloud.region,
            "CNIKIT_PROFILE": self.profile,
            "CNIKIT_TIME_SCALE": str(self.scale),
            **self.env,
        }
        if self.runtime == "process":
            d = DaemonProcess(self.state_root / f"daemon-{node.name}", env=env, netns=node.ns.path)
        else:
            from cnikit.containers.noderuntime import make_daemon

            d = make_daemon(self.runtime, self.state_root / f"daemon-{node.name}", env=env,
                            netns=node.ns.path, run_id=self.fabric.rid)
        d.on_start = lambda pid: self._record(pid)
        return d

    def _record(self, pid: int) -> None:
        from cnikit.fabric import cleanup

        cleanup.record_process(self.fabric.run.dir, pid)

    def __enter__(self) -> CniCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- pods -------------------------------------------------------------------------

    def netconf(self, node: int, **extra) -> dict:
        return {"cniVersion": "1.0.0", "name": "aws-cni", "type": "cnikit-cni",
                "daemonSocket": str(self.daemons[node].socket_path), **extra}

    def add_pod(self, node: int, name: str, namespace: str = "default", **conf):
        return self.fabric.add_pod_cni(node, self.netconf(node, **conf), [str(self.bin_dir)],
                                       args={"K8S_POD_NAMESPACE": namespace, "K8S_POD_NAME": name})

    def delete_pod(self, pod) -> None:
        self.fabric.delete_pod(pod)

    # ---- daemons ----------------------------------------------------------------------

    def status(self, node: int) -> dict:
        return request(self.daemons[node].socket_path, {"cmd": "status"})

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL) -> None:
        self.fabric.nodes[node].kill_daemon(sig)

    def restart_daemon(self, node: int) -> None:
        self.fabric.nodes[node].restart_daemon()

    def close(self) -> None:
        self._stop_daemons()
        if self.fabric is not None:
            self.fabric.close()
            self.fabric = None
        if self.imds is not None:
            self.imds.stop()
        if self.cloud is not None:
            self.cloud.stop()

    def _stop_daemons(self) -> None:
        """Stop every daemon at once (each takes a moment to exit), then drop their state."""
        def stop(d) -> None:
            with contextlib.suppress(Exception):  # a dead daemon must not stop the cleanup
                d.stop()

        if self.daemons:
            with ThreadPoolExecutor(len(self.daemons)) as pool:
                list(pool.map(stop, self.daemons))
        if self.state_root is not None and self.state_root.parent == SHM:
            shutil.rmtree(self.state_root, ignore_errors=True)


SHM = Path("/dev/shm")


def state_root(rid: str, run_dir: Path) -> Path:
    """Where the daemons keep socket and ipam.json: a tmpfs, like a node's /var/run.

    Upstream's checkpoint lives in /var/run/aws-node, a tmpfs on real nodes, where its fsync
    is nearly free; on this machine /run is ext4 and the same fsync costs ~12 ms per ADD.
    Leftovers of dead runs are removed here, since the fabric's cleanup does not look in /dev/shm.
    """
    from cnikit.runtime import live_run_ids

    if not os.path.ismount(SHM):
        return run_dir
    live = live_run_ids()
    for d in SHM.glob("cnikit-*"):
        if d.name.removeprefix("cnikit-") not in live:
            shutil.rmtree(d, ignore_errors=True)
    root = SHM / f"cnikit-{rid}"
    root.mkdir(parents=True, exist_ok=True)
    return root


def ec2_ips_of(snap, instance_id: str) -> dict[str, tuple[str, int, bool]]:
    """ip -> (eni_id, device_index, is_primary) for the ENIs EC2 attaches to instance_id.

    Read per ENI rather than from `snap.ips`: moto in one process keeps every VPC a test
    session made, so the same address can exist on another, unrelated ENI.
    """
    out = {}
    for eni in snap.enis.values():
        if eni.instance_id == instance_id:
            for ip in eni.ips:
                out[ip] = (eni.eni_id, eni.device_index, ip == eni.primary_ip)
    return out
