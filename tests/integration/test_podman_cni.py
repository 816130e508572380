"""podman as a real CNI client: its CNI network backend runs `cnikit-cni` from a conflist
against a node's daemon. A container gets a VPC IP from that daemon, reaches a pod on the
other node with real ICMP (both ways), and `podman rm` frees the IP: afterwards the daemon's
datastore and EC2 agree, ENI by ENI. Once with the daemon as a process, once in a podman
container itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cnikit.containers.podman import Podman
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
    pytest.mark.skipif(Podman.available() is not None, reason=f"{Podman.available()}"),
]




@pytest.fixture(scope="module", params=["process", "podman"])
def cluster(request):
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=2, profile="hardened", scale=0.05, runtime=request.param) as c:
        c.peer = c.add_pod(1, "peer")
        yield c


@pytest.fixture
def net(cluster):
    from cnikit.containers.cni_client import PodmanCniNetwork

    n = PodmanCniNetwork(cluster, node=0).create()
    yield n
    n.close()


def assignments(cluster, node):
    return {a["ip"]: a for a in cluster.status(node)["assignments"]}


def datastore_matches_ec2(cluster, node) -> bool | tuple:
    """Every ENI of the daemon holds exactly the secondary IPs EC2 has on it."""
    enis = cluster.status(node)["enis"]
    owners = cluster.cloud.gate.owners().enis
    for eni_id, e in enis.items():
        ec2 = owners.get(eni_id)
        if ec2 is None:
            return False
        secondary = set(ec2.ips) - {ec2.primary_ip}
        if set(e["ips"]) != secondary:
            return False
    return True


def ping_from_ns(ns_path: str, dst: str) -> int:
    from cnikit.containers.cni_client import ping_code

    p = subprocess.run(["nsenter", f"--net={ns_path}", sys.executable, "-c", ping_code(dst)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip())


def test_container_gets_vpc_ip_reaches_other_node_and_frees_it(cluster, net):
    from cnikit.containers.cni_client import ping_code

    c = net.run("web")
    assert c.ip, "podman reported no IP for the CNI network"
    # The IP is the daemon's, held for podman's container id, on one of node 0's ENIs in EC2.
    held = assignments(cluster, 0)
    assert c.ip in held and held[c.ip]["containerID"] == c.id
    owner = cluster.cloud.gate.owners().ips[c.ip]
    assert owner.instance_id == cluster.topo.instances[0].instance_id
    assert owner.eni_id == held[c.ip]["eniId"]

    # Real packets both ways between the container and a pod on node 1.
    r = net.python(c, ping_code(cluster.peer.ip))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 3, f"container -> {cluster.peer.ip}: {r.stdout!r}"
    assert ping_from_ns(cluster.peer.path, c.ip) == 3

    net.remove(c)
    assert c.ip not in assignments(cluster, 0)
    assert not os.path.exists(c.netns or "/nonexistent"), "podman left the container's netns"
    wait_for(lambda: datastore_matches_ec2(cluster, 0), 10, "datastore and EC2 to agree")
    # The freed IP does not answer any more.
    assert ping_from_ns(cluster.peer.path, c.ip) == 0


def test_two_containers_distinct_ips_and_reach_each_other(cluster, net):
    from cnikit.containers.cni_client import ping_code

    a, b = net.run("a"), net.run("b")
    assert a.ip and b.ip and a.ip != b.ip
    r = net.python(a, ping_code(b.ip))
    assert int(r.stdout) == 3, r.stderr
    net.remove(a)
    net.remove(b)
    held = assignments(cluster, 0)
    assert a.ip not in held and b.ip not in held
    wait_for(lambda: datastore_matches_ec2(cluster, 0), 10, "datastore and EC2 to agree")


def test_daemon_down_fails_the_container_start_with_the_plugins_reason(cluster, net):
    import signal

    from cnikit.errors import EnvironmentProblem

    before = set(assignments(cluster, 0))
    cluster.kill_daemon(0, signal.SIGKILL)
    try:
        with pytest.raises(EnvironmentProblem, match="cnikit daemon is not running"):
            net.run("orphan")
    finally:
        cluster.restart_daemon(0)
        net.podman.run("rm", "-f", "--time", "0", f"ck-{net.rid}-orphan", check=False)
    assert set(assignments(cluster, 0)) == before
