"""Targets on a live VPC: builds described by a target file, run through the same seam as the
built-ins. The reference daemon as an external target (its command line only), the Go
reference plugins (ptp + host-local) as a plugin-only build that never asks EC2, and the
reference daemon's image in podman."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.waiting import wait_for

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
KIT_BIN = Path(sys.executable).parent


def reference_target(path: Path, daemon: str, profile: str = "hardened") -> Path:
    """The reference daemon as a vendor would describe it: no built-in knowledge."""
    path.write_text(textwrap.dedent(f"""\
        name = "reference-external"
        version = "0.1.0"

        [daemon]
        {daemon}
        env = {{ CNIKIT_PROFILE = "{profile}" }}
        ready = {{ socket = "{{state_dir}}/ipamd.sock", timeout = 60 }}

        [plugin]
        binaries = ["{KIT_BIN / 'cnikit-cni'}"]
        conflist = {{ cniVersion = "1.0.0", name = "aws-cni", plugins = [ {{ type = "cnikit-cni", daemonSocket = "{{state_dir}}/ipamd.sock" }} ] }}

        [observe]
        introspection = 61679
        metrics = 61678
        """))
    return path


def owner_of(cluster, ip: str):
    return cluster.cloud.gate.owners().ips.get(ip)


def netns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


# ---- the reference daemon as an external target ------------------------------------------

@pytest.fixture(scope="module")
def external(tmp_path_factory):
    from cnikit.cluster import CniCluster

    path = reference_target(tmp_path_factory.mktemp("target") / "reference.toml",
                            f'command = ["{sys.executable}", "-m", "cnikit.cli", "daemon", '
                            '"--state-dir", "{state_dir}"]')
    with CniCluster(nodes=2, target=str(path), scale=0.05, runtime="process") as c:
        yield c


def test_the_reference_daemon_as_a_target_file_gives_pods_ec2_ips(external):
    c = external
    assert not c.target.builtin and c.target.name == "reference-external"
    # The plugin in each node's bin dir is the file the target names, and its conflist is
    # rendered into the node's conf dir.
    for n, node in enumerate(c.fabric.nodes):
        places = c.places[n]
        assert (places.cni_bin_dir / "cnikit-cni").resolve() == (KIT_BIN / "cnikit-cni").resolve()
        conf = json.loads((places.cni_conf_dir / "10-aws-cni.conflist").read_text())
        assert conf["plugins"][0]["daemonSocket"] == f"{places.state_dir}/ipamd.sock"
        # The daemon runs inside the node's namespace.
        assert netns_inode(c.daemons[n].pid) == os.stat(node.ns.path).st_ino
    pods = [c.add_pod(n % 2, f"web-{n}") for n in range(4)]
    for pod in pods:
        owner = owner_of(c, pod.ip)
        assert owner is not None and owner.instance_id == pod.node.instance_id, pod.ip
    assert len({p.ip for p in pods}) == 4


def test_observe_ports_answer_inside_the_node_namespace(external):
    from cnikit.targets import ReadySpec
    from cnikit.targets.node import is_ready

    node = external.fabric.nodes[0]
    spec = ReadySpec(url=f"http://127.0.0.1:{external.target.observe.introspection}/v1/enis")
    assert wait_for(lambda: is_ready(spec, node.ns.path), 10)
    metrics = ReadySpec(url=f"http://127.0.0.1:{external.target.observe.metrics}/metrics")
    assert is_ready(metrics, node.ns.path)


def test_kill_and_restart_keep_the_state(external):
    c = external
    pod = c.add_pod(0, "survivor")
    d = c.daemons[0]
    first = d.pid
    c.kill_daemon(0, signal.SIGKILL)
    assert not d.alive()
    assert pod.ip in {a["ipv4"] for a in d.checkpoint()["allocations"]}  # state dir kept
    c.restart_daemon(0)
    assert d.alive() and d.pid != first and d.starts == 2
    assert netns_inode(d.pid) == os.stat(c.fabric.nodes[0].ns.path).st_ino
    # The restarted daemon recovered the pod and still serves new ones.
    assert pod.ip in {a["ip"] for a in c.status(0)["assignments"]}
    other = c.add_pod(0, "after-restart")
    assert other.ip != pod.ip and owner_of(c, other.ip).instance_id == pod.node.instance_id


# ---- a plugin-only build: the Go reference plugins ---------------------------------------

@pytest.mark.skipif(not (CNI_PLUGINS / "ptp").exists(),
                    reason="containernetworking-plugins is not installed (apt-get install "
                           "containernetworking-plugins)")
def test_ptp_host_local_chain_gives_pods_ips_ec2_never_assigned(tmp_path):
    from cnikit.cluster import CniCluster

    path = tmp_path / "ptp.toml"
    # The daemon forks a child: a kill must reach the whole process group.
    path.write_text(textwrap.dedent(f"""\
        name = "ptp-host-local"
        version = "1.0"

        [daemon]
        command = ["sh", "-c", "sleep 1000 & exec sleep 1000"]

        [plugin]
        binaries = ["{CNI_PLUGINS / 'ptp'}", "{CNI_PLUGINS / 'host-local'}", "{CNI_PLUGINS / 'tuning'}"]
        conflist = {{ cniVersion = "1.0.0", name = "ptp", plugins = [ {{ type = "ptp", ipMasq = false, ipam = {{ type = "host-local", subnet = "{{subnet_cidr}}", dataDir = "{{state_dir}}/ipam" }} }}, {{ type = "tuning", mtu = 1400 }} ] }}
        """))
    with CniCluster(nodes=2, target=str(path), scale=0.05, runtime="process") as c:
        pods = [c.add_pod(n % 2, f"p-{n}") for n in range(4)]
        subnet = c.topo.subnet_cidr
        import ipaddress

        for pod in pods:
            assert ipaddress.ip_address(pod.ip) in ipaddress.ip_network(subnet), pod.ip
            # The chain ran: tuning got ptp's result and set the pod's eth0.
            link = subprocess.run(["nsenter", f"--net={pod.ns.path}", "ip", "-o", "link", "show",
                                   "eth0"], capture_output=True, text=True, check=True).stdout
            assert " mtu 1400 " in link, link
        # Nobody asked EC2 for an address: the pods' IPs are host-local's, EC2 never assigned
        # them for the pods (one may collide with an address EC2 gave a node's own ENI).
        asked = [r for r in c.cloud.gate.audit.records() if "Assign" in r.action]
        assert asked == [], asked
        owned = [p.ip for p in pods if (o := owner_of(c, p.ip)) is not None
                 and o.instance_id == p.node.instance_id]
        assert len(owned) < len(pods) and len({p.ip for p in pods}) < len(pods), owned
        # host-local keeps its leases in the node's state dir, not the host's /var/lib/cni.
        assert list((c.places[0].state_dir / "ipam" / "ptp").glob("10.*"))
        # Killing the daemon reaches the child it forked.
        d = c.daemons[0]
        group = os.getpgid(d.pid)
        members = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == group]
        assert len(members) >= 2, members
        c.kill_daemon(0, signal.SIGKILL)
        assert wait_for(lambda: not [p for p in os.listdir("/proc")
                                     if p.isdigit() and _pgid(int(p)) == group], 5)
        c.restart_daemon(0)
        assert d.alive()
        for pod in pods:
            c.delete_pod(pod)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# ---- the reference daemon's image in podman ----------------------------------------------

def test_the_reference_daemon_image_as_a_target_in_podman(tmp_path):
    from cnikit.cluster import CniCluster
    from cnikit.containers.container_daemon import ContainerDaemon
    from cnikit.containers.image import ensure_image
    from cnikit.containers.podman import LABEL_RUN, Podman

    if Podman.available() is not None:
        pytest.skip(Podman.available())
    image = ensure_image(Podman())
    # The target's [daemon] env reaches the container: here the profile the image runs as
    # (vpc-cni-1.18.3, whose 3019 violation in podman tests/integration/test_runtime_podman.py
    # replays).
    path = reference_target(tmp_path / "image.toml", f'image = "{image}"',
                            profile="vpc-cni-1.18.3")
    with CniCluster(nodes=1, target=str(path), scale=0.05, runtime="podman") as c:
        assert c.target.image == image
        d = c.daemons[0]
        assert isinstance(d, ContainerDaemon) and d.alive()
        env = dict(e.split("=", 1) for e in d.engine.inspect(d.name)["Config"]["Env"])
        assert env["CNIKIT_PROFILE"] == "vpc-cni-1.18.3"
        node_ns = os.stat(c.fabric.nodes[0].ns.path).st_ino
        assert netns_inode(d.pid) == node_ns
        assert os.stat(f"/proc/{d.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
        pod = c.add_pod(0, "in-podman")
        assert owner_of(c, pod.ip).instance_id == c.fabric.nodes[0].instance_id
        c.kill_daemon(0, signal.SIGKILL)
        assert not d.alive()
        c.restart_daemon(0)
        assert d.alive() and d.starts == 2
        assert pod.ip in {a["ip"] for a in c.status(0)["assignments"]}
        rid = c.fabric.rid
    left = Podman().out("ps", "-a", "--filter", f"label={LABEL_RUN}={rid}", "--format", "{{.Names}}")
    assert left == "", f"containers left behind: {left}"


# ---- readiness, inside the node's namespace --------------------------------------------

@pytest.fixture
def bare_ns():
    """A namespace of its own with loopback up (what a node has), removed afterwards."""
    from cnikit.fabric import netns

    name = f"cktest-ready-{os.getpid()}"
    os.close(netns.create(name))
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield str(netns.netns_path(name))
    finally:
        netns.remove(name)


def free_host_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_url_readiness_is_asked_inside_the_namespace(bare_ns, tmp_path):
    from cnikit.targets import ReadySpec
    from cnikit.targets.node import TargetProcess, is_ready

    port = free_host_port()  # free here, so only the namespace's 127.0.0.1 can answer
    spec = ReadySpec(url=f"http://127.0.0.1:{port}/", timeout=30)
    d = TargetProcess([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                      tmp_path / "state", {}, bare_ns, spec)
    try:
        d.start(wait=30)
        assert is_ready(spec, bare_ns)
        assert not is_ready(spec, None)  # the host's own loopback has nothing there
    finally:
        d.stop()
    assert not d.alive()


def test_an_abstract_socket_readiness_is_the_namespace_s(bare_ns, tmp_path):
    from cnikit.targets import ReadySpec
    from cnikit.targets.node import TargetProcess, is_ready

    name = f"cktest-ready-{os.getpid()}"
    serve = ("import socket, time\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             f"s.bind('\\0{name}'); s.listen()\n"
             "while True:\n    c, _ = s.accept(); c.close()\n")
    spec = ReadySpec(socket=f"@{name}", timeout=30)
    d = TargetProcess([sys.executable, "-c", serve], tmp_path / "state", {}, bare_ns, spec)
    try:
        d.start(wait=30)
        assert is_ready(spec, bare_ns) and not is_ready(spec, None)
    finally:
        d.stop()


def test_a_daemon_that_exits_or_never_answers_is_not_ready(bare_ns, tmp_path):
    from cnikit.errors import DaemonNotReady
    from cnikit.targets import ReadySpec
    from cnikit.targets.node import TargetProcess

    gone = TargetProcess(["false"], tmp_path / "a", {}, bare_ns,
                         ReadySpec(socket=str(tmp_path / "a.sock"), timeout=10))
    with pytest.raises(DaemonNotReady) as e:
        gone.start(wait=10)
    assert e.value.exited and "exited" in str(e.value)
    silent = TargetProcess(["sleep", "60"], tmp_path / "b", {}, bare_ns,
                           ReadySpec(socket=str(tmp_path / "b.sock"), timeout=0.5))
    try:
        with pytest.raises(DaemonNotReady) as e:
            silent.start(wait=10)
        assert not e.value.exited and "not ready after" in str(e.value)
    finally:
        silent.stop()
    assert not silent.alive()
