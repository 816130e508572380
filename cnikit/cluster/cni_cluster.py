"""A live VPC with the build under test (a target) on every node, pods wired through its
CNI plugin.

    with CniCluster(nodes=3, target="hardened") as c:     # or target="my-cni.toml"
        pod = c.add_pod(0, "web-1")
        c.kill_daemon(0, signal.SIGKILL); c.restart_daemon(0)   # through c.nemesis
        c.nemesis.imds_fault("stale", target={"mac": mac})     # every fault: c.history
        c.status(0)          # the reference daemon's own status API (built-ins only)

Real parts only: moto behind the EC2 gate, the fault IMDS answering inside the VPC, the
fabric's namespaces, the target's daemon once per node namespace (its own state dir), its
plugin installed per node and executed by the fabric's CNI runner as a runtime would.
The target's cluster-wide components (an operator) run once per run, in the VPC namespace,
started and ready before the nodes' daemons (cnikit.targets.component); the nemesis kills and
restarts them by name (c.act("kill-component", component="operator")).
The cluster's object store (cnikit.kube: nodes, pods, custom resources) serves every node
and component at the VPC address STORE_ADDR (KUBECONFIG in their environment) and this
process at `c.store.url`; the pods the kit adds are in it (`c.kube`).
`profile=` is an alias of `target=` for a built-in name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cnikit.check.history import History
from cnikit.cloud.limits import node_types
from cnikit.cluster import retries
from cnikit.cluster.nemesis import Nemesis
from cnikit.daemon.server import request
from cnikit.errors import UsageError

# Upstream's settings of an IPv6 cluster (EKS sets them on aws-node).
IPV6_MODE = {"ENABLE_IPv6": "true", "ENABLE_IPv4": "false", "ENABLE_PREFIX_DELEGATION": "true"}


class CniCluster:
    def __init__(self, nodes: int = 3, profile: str | None = None, instance_type: str = "m5.large",
                 scale: float = 0.1, env: dict[str, str] | None = None, imds_seed: int | None = None,
                 runtime: str | None = None, ec2: str = "moto", ec2_endpoint: str | None = None,
                 seed: int | None = None, target=None, ip_family: str | None = None,
                 subnet_tags: dict[str, str] | None = None,
                 subnets: Sequence[tuple[str, dict[str, str]]] = (),
                 instance_types: Sequence[str] | None = None):
        from cnikit.targets import default_name, resolve_target
        from cnikit.targets.node import check_runtime_for

        self.target = resolve_target(target or profile or default_name())
        self.profile = self.target.name  # old readers
        self.n_nodes = nodes
        # Each node's instance type (`instance_types`, one per node, mixes them); the
        # first node's is `instance_type`, for readers of one type.
        try:
            self.instance_types = node_types(instance_type, instance_types, nodes)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.instance_type = self.instance_types[0] if nodes else instance_type
        self.scale = scale
        self.env = dict(env or {})
        self.imds_seed = imds_seed
        # process | podman | docker (cnikit.containers.noderuntime); default $CNIKIT_RUNTIME.
        self.runtime = runtime or os.environ.get("CNIKIT_RUNTIME") or "process"
        check_runtime_for(self.target, self.runtime)  # before anything starts
        self.ec2, self.ec2_endpoint, self.seed = ec2, ec2_endpoint, seed
        # The nodes' subnet's tags, and other subnets of their AZ as (CIDR, tags): what
        # subnet discovery (`kubernetes.io/role/cni`) chooses from.
        self.subnet_tags = dict(subnet_tags or {})
        self.subnets = list(subnets)
        # "ipv4": an IPv4 VPC; "ipv6": a dual-stack VPC, the build in its IPv6 mode; "dual":
        # a dual-stack VPC, the build as it comes. Default: the target's own family.
        self.ip_family = ip_family or self.target.ip_family
        if self.ip_family not in ("ipv4", "ipv6", "dual"):
            raise UsageError(f"ip family {self.ip_family!r}: one of ipv4, ipv6, dual")
        self.cloud = self.imds = self.fabric = self.store = None
        self.kube = None  # cnikit.cluster.kube_objects.KubeObjects: the run's nodes and pods
        self.kube_env: dict[str, str] = {}  # what points a Kubernetes client at the store
        self.topo = None
        self.daemons: list = []
        self.components: dict = {}  # name -> its process (cnikit.targets.component)
        self.places: list = []  # per node: cnikit.targets.node.NodePlaces
        self.conflists: list[dict] = []  # per node: the rendered conflist
        self.bin_dir: Path | None = None  # node 0's CNI bin dir (every node's holds the same)
        self.state_root: Path | None = None
        # The run's history: the nemesis records every fault here, a Watch adds the rest.
        self.history = History()
        self.nemesis: Nemesis | None = None

    def start(self) -> CniCluster:
        try:
            self._start_cloud()
            self.nemesis = Nemesis(self.history, imds_control=self.imds.control_url,
                                   cloud=self.cloud, daemons=self)
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
        self.topo = self.cloud.bootstrap(nodes=self.n_nodes, instance_types=self.instance_types,
                                         ipv6=self.ip_family != "ipv4",
                                         subnet_tags=self.subnet_tags)
        for cidr, tags in self.subnets:
            self.cloud.add_subnet(self.topo, cidr, tags)
        self.imds = ImdsServer(ec2_endpoint=self.cloud.endpoint, seed=self.imds_seed).start()

    def _start_nodes(self) -> None:
        """The fabric for self.topo, then per node the target's plugin and its daemon."""
        from cnikit.cluster.kube_objects import KubeObjects
        from cnikit.fabric.topology import Fabric
        from cnikit.kube import KubeApi
        from cnikit.targets.node import install_plugin

        # The run's own object store (a cloud and IMDS may serve several runs: pytest's).
        self.store = KubeApi().start()
        self.kube = KubeObjects(self.store.objects)
        self.fabric = Fabric(self.cloud, self.topo, imds=self.imds, store=self.store).start()
        self.state_root = state_root(self.fabric.rid, self.fabric.run.dir)
        self._store_clients()
        self._start_components()
        for node in self.fabric.nodes:
            places = self._places(node)
            self.places.append(places)
            self.conflists.append(install_plugin(self.target, places))
            self.daemons.append(self._daemon(node, places))
        self.bin_dir = self.places[0].cni_bin_dir
        for d in self.daemons:
            d.start(wait=0)
        for d in self.daemons:
            d.wait_ready(60)

    def _start_components(self) -> None:
        """The target's cluster-wide components, each started once and waited for (the
        nodes' agents expect their operator)."""
        from cnikit.targets.component import ClusterPlaces, component_process

        for spec in self.target.components:
            places = ClusterPlaces(state_dir=self.state_root / f"component-{spec.name}",
                                   subnet_cidr=self.topo.subnet_cidr, vpc_cidr=self.topo.vpc_cidr,
                                   ec2_endpoint=self.fabric.ec2_endpoint,
                                   imds_endpoint=self.fabric.imds_endpoint,
                                   region=self.cloud.region)
            proc = component_process(spec, places, self.daemon_env(), self.fabric.vpc.path)
            proc.on_start = self._record
            self.components[spec.name] = proc
            proc.start(wait=0)
        for proc in self.components.values():
            proc.wait_ready(60)

    def _store_clients(self) -> None:
        """The kubeconfig every node and component reads (the store at its VPC address),
        one for this machine's own clients (kubeconfig.local), and the nodes' objects."""
        from cnikit.kube import kubeconfig

        inside = self.fabric.store_endpoint
        path = kubeconfig.write(self.state_root / "kubeconfig", inside)
        kubeconfig.write(self.state_root / "kubeconfig.local", self.store.url)
        self.kube_env = kubeconfig.client_env(path, inside)
        self.kube.register_nodes(self.fabric)

    def _places(self, node):
        from cnikit.targets.node import NodePlaces

        cni = self.fabric.run.dir / "cni" / node.name
        return NodePlaces(state_dir=self.state_root / f"daemon-{node.name}", node=node.name,
                          node_index=node.index, instance_id=node.instance_id,
                          subnet_cidr=self.topo.subnet_cidr, vpc_cidr=self.topo.vpc_cidr,
                          cni_bin_dir=cni / "bin", cni_conf_dir=cni / "net.d",
                          ec2_endpoint=self.fabric.ec2_endpoint,
                          imds_endpoint=self.fabric.imds_endpoint, region=self.cloud.region)

    def daemon_env(self) -> dict[str, str]:
        """What the kit gives every target's daemon (the scenario's env over it). An IPv6
        run sets upstream's IPv6-mode variables, as EKS's IPv6 clusters do."""
        family = IPV6_MODE if self.ip_family == "ipv6" else {}
        return {
            **self.cloud.client_env(self.fabric.ec2_endpoint),
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": self.fabric.imds_endpoint,
            "CNIKIT_TIME_SCALE": str(self.scale),
            **self.kube_env,
            **family,
            **self.env,
        }

    def _daemon(self, node, places):
        from cnikit.targets.node import node_daemon

        d = node_daemon(self.target, places, self.daemon_env(), node.ns.path, self.runtime,
                        run_id=self.fabric.rid)
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
        """The node's network configuration: a one-plugin conflist as that plugin's own
        config (extra keys added to it), a chain as the conflist (extra keys on its first)."""
        conf = self.conflists[node]
        plugins = conf["plugins"]
        if len(plugins) == 1:
            return {"cniVersion": conf["cniVersion"], "name": conf["name"], **plugins[0], **extra}
        return {**conf, "plugins": [{**plugins[0], **extra}, *plugins[1:]]}

    def add_pod(self, node: int, name: str, namespace: str = "default",
                annotations: dict[str, str] | None = None, **conf):
        """A pod on `node`, in the store first (as scheduled), then its sandbox ADDed through
        the node's plugins with kubelet's CNI_ARGS; its IP then in the store."""
        obj = self.kube.scheduled(self.fabric.nodes[node].name, namespace, name, annotations)
        try:
            pod = self.fabric.add_pod_cni(node, self.netconf(node, **conf),
                                          [str(self.places[node].cni_bin_dir)],
                                          args=self.kube.cni_args(obj), env=self.plugin_env())
        except BaseException:
            self.kube.failed(obj)
            raise
        self.kube.running(obj, pod.name, pod.ip)
        return pod

    def plugin_env(self) -> dict[str, str]:
        """The environment a plugin runs with: the runtime's (this process's), with what
        the kit gives every daemon (EC2 and IMDS endpoints, region, credentials, time scale,
        the scenario's variables) as a node's runtime would have it; libcni adds CNI_*."""
        return {**os.environ, **self.daemon_env()}

    def delete_pod(self, pod, netns_path: str | None = None, send_del: bool = True) -> None:
        """Graceful, as an API server and kubelet do it: the object marked, the sandbox
        DELeted and removed, then the object removed."""
        self.kube.deleting(pod.name)
        try:
            self.fabric.delete_pod(pod, netns_path, send_del)
        finally:
            self.kube.deleted(pod.name)

    # ---- the runtime's retries (cnikit.cluster.retries: one cni-retry operation each) ----

    def repeat_add(self, pod) -> str | None:
        """ADD again for a live pod's sandbox (same container ID, netns, ifname): the IP
        answered, or None when the plugin answered an error."""
        return retries.repeat_add(self.history, pod)

    def replay_delete(self, pod) -> bool:
        """DEL of a deleted pod's sandbox again with its old prevResult: True on success."""
        return retries.replay_delete(self.history, pod, list(self.fabric.pods.values()))

    def delete_without_netns(self, pod) -> bool:
        """Delete the pod with an empty CNI_NETNS in its DEL: True on success."""
        try:
            self.delete_pod(pod, netns_path="")
            error = None
        except Exception as e:  # noqa: BLE001 - recorded and judged
            error = e
            # The namespace is gone all the same: a DEL not answered, as the leak checker
            # reads it (the runtime would retry it).
            self.history.append("client", "fail", "pod-delete",
                                {"pod": pod.name, "error": str(e)[:200]})
        retries.record(self.history, "del-empty-netns", pod, error)
        return error is None

    def try_delete(self, pod, op: str) -> Exception | None:
        """A DEL of a live pod's sandbox, the pod kept (`op` names the retry): its error."""
        self.fabric.del_in_flight(pod, done=False)
        error = retries.try_delete(self.history, pod, op)
        if error is not None:
            self.fabric.del_in_flight(pod, done=True)
        return error

    # ---- daemons ----------------------------------------------------------------------

    def status(self, node: int) -> dict:
        """The reference daemon's private status API (a foreign build has none)."""
        return request(self.daemons[node].socket_path, {"cmd": "status"})

    def instance_id(self, node: int) -> str:
        return self.fabric.nodes[node].instance_id

    def node_of(self, instance_id: str) -> int | None:
        return next((n.index for n in self.fabric.nodes if n.instance_id == instance_id), None)

    def kill_daemon(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Send sig to the node's daemon (SIGKILL by default): a nemesis operation."""
        self.nemesis.kill_daemon(node, sig)

    def crash_at(self, node: int, action: str):
        """Arm a crash point: the node's daemon is SIGKILLed when the gate serves `action`
        from it, before the answer leaves (a nemesis operation; cnikit.cluster.crash_point)."""
        return self.nemesis.crash_at(node, action)

    def act(self, action: str, **attrs) -> dict:
        """One nemesis action by name (cnikit.cluster.actions: kill, restart, restart-all,
        crash-at, sweep-enis, unassign, detach-eni), its attributes checked as
        $GATE/nemesis checks them; its result. SpecError (one line) for a bad one."""
        from cnikit.cluster.actions import act

        return act(self.nemesis, {"action": action, **attrs}, len(self.daemons))

    def restart_daemon(self, node: int, wait: float = 60.0) -> None:
        """Restart the node's daemon (its state dir kept): a nemesis operation."""
        self.nemesis.restart_daemon(node, wait)

    def restart_all(self, wait: float = 60.0) -> dict[int, Exception]:
        """Every node's daemon killed, then all started together: a nemesis operation;
        node -> the error of a restart that failed."""
        return self.nemesis.restart_all(range(len(self.daemons)), wait)

    # What the nemesis does its acts with (cnikit.cluster.nemesis_daemons.NodeDaemons):
    # nothing here records, so a scenario or a test kills and restarts through the nemesis.

    def signal_daemon(self, node: int, sig: int) -> None:
        """Send sig to the node's daemon, unrecorded (kill_daemon records it)."""
        self.daemons[node].kill(sig)

    def stop_and_start_daemon(self, node: int, wait: float) -> None:
        """Stop the node's daemon if it runs, start it and wait up to `wait` s until it is
        ready, unrecorded (restart_daemon records it)."""
        d = self.daemons[node]
        if d.alive():
            d.stop()
        d.start(wait=wait)

    def daemon_state_dir(self, node: int) -> Path:
        return self.places[node].state_dir

    def daemon_pids(self, node: int) -> set[int]:
        """The daemon's process, if it runs (a restarted one has a new pid)."""
        pid = self.daemons[node].pid
        return {pid} if pid else set()

    # The nodes' own networks (cnikit.cluster.nemesis_hostnet.NodeNetworks).

    def node_netlink(self, node: int):
        return self.fabric.nodes[node].ns.nl

    def pod_node(self, pod: str) -> tuple[int, str]:
        p = self.fabric.pods.get(pod)
        if p is None:
            raise ValueError(f"no live pod {pod!r}")
        return p.node.index, p.ip

    # The same for the cluster-wide components, by name (cnikit.cluster.nemesis_components).

    def component(self, name: str):
        """The component's process; ValueError (one line) naming the run's components."""
        proc = self.components.get(name)
        if proc is None:
            have = ", ".join(self.components) or "none"
            raise ValueError(f"no component {name!r} in this run (its components: {have})")
        return proc

    def signal_component(self, name: str, sig: int) -> None:
        self.component(name).kill(sig)

    def component_calling(self, source: str, port: int) -> str | None:
        """The component holding the connection from source:port (each runs in its own
        process group, in the VPC namespace); None: none of them."""
        from cnikit.targets.connection_owner import holds_connection

        return next((name for name, proc in self.components.items()
                     if proc.pid and holds_connection(proc.pid, source, port)), None)

    def stop_and_start_component(self, name: str, wait: float) -> None:
        proc = self.component(name)
        if proc.alive():
            proc.stop()
        proc.start(wait=wait)

    def close(self) -> None:
        self.close_run()
        if self.imds is not None:
            self.imds.stop()
        if self.cloud is not None:
            self.cloud.stop()

    def close_run(self) -> None:
        """What this run made goes: daemons, components, the fabric and the object store
        (the cloud and the IMDS are close()'s: pytest's clusters share them)."""
        self._stop_daemons()
        if self.fabric is not None:
            self.fabric.close()
            self.fabric = None
        if self.store is not None:
            self.store.stop()
            self.store = None

    def _stop_daemons(self) -> None:
        """Stop every daemon and component at once (each takes a moment to exit), then drop
        their state."""
        def stop(d) -> None:
            with contextlib.suppress(Exception):  # a dead daemon must not stop the cleanup
                d.stop()

        running = [*self.daemons, *self.components.values()]
        if running:
            with ThreadPoolExecutor(len(running)) as pool:
                list(pool.map(stop, running))
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
