"""The reference daemon on 3 nodes with pods wired by cnikit-cni (hardened profile):
reachability, unique IPs, pool targets, 200 delete/re-add cycles, SIGKILL mid-ADD."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from tests.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

SEED = int(os.environ.get("CNIKIT_SEED", "4242"))




@pytest.fixture(scope="module")
def cluster():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=3, profile="hardened", scale=0.05) as c:
        yield c


@pytest.fixture(scope="module")
def prober():
    from cnikit.daemon.probe import Prober

    p = Prober()
    yield p
    p.close()


class Pods:
    def __init__(self, cluster, prober):
        self.c, self.p = cluster, prober
        self.live: dict[str, object] = {}  # k8s pod name -> fabric Pod
        self.seq = 0
        self.retries = 0

    def add(self, node: int):
        from cnikit.fabric.cni import CniError

        self.seq += 1
        name = f"pod-{self.seq}"
        # Like kubelet: "try again later" (11) is retried. Churn here is far faster than the
        # scaled 1.5 s IP cooldown, so a node can briefly have every IP cooling down.
        end = time.monotonic() + 15
        while True:
            try:
                pod = self.c.add_pod(node, name)
                break
            except CniError as e:
                if e.code != 11 or time.monotonic() > end:
                    raise
                self.retries += 1
                time.sleep(0.1)
        pod.k8s_name = name
        self.live[name] = pod
        self.p.add(name, pod.ns.fd, pod.ip)
        return pod

    def delete(self, name: str):
        pod = self.live.pop(name)
        self.p.remove(name)
        self.c.delete_pod(pod)

    def check_unique(self):
        ips = [p.ip for p in self.live.values()]
        assert len(ips) == len(set(ips)), f"shared IPs: {sorted(ips)}"

    def check_held(self):
        """Every live pod's IP is held for exactly that sandbox by its node's daemon; nothing else is."""
        for n in range(self.c.n_nodes):
            st = self.c.status(n)
            held = {a["containerID"]: a["ip"] for a in st["assignments"]}
            mine = {p.name: p.ip for p in self.live.values() if p.node.index == n}
            assert held == mine, f"node {n}: daemon holds {held}, pods are {mine}"

    def check_owned_by_ec2(self):
        from cnikit.cluster import ec2_ips_of

        snap = self.c.cloud.gate.owners()
        for p in self.live.values():
            mine = ec2_ips_of(snap, p.node.instance_id)
            assert p.ip in mine and not mine[p.ip][2], (p.ip, mine.get(p.ip))

    def check_reachable(self, sample: int | None = None, rng=None):
        names = list(self.live)
        pairs = [(a, b) for a in names for b in names if a != b]
        if sample and len(pairs) > sample:
            pairs = rng.sample(pairs, sample)
        failed = [(a, b) for a, b in pairs if not self.p.probe(a, b, self.live[b].ip)]
        assert not failed, f"{len(failed)}/{len(pairs)} unreachable, e.g. {failed[:3]}"


def settled(cluster):
    return all(cluster.status(n)["withinTargets"] for n in range(cluster.n_nodes))


def test_30_pods_reachable_unique_and_pool_within_targets(cluster, prober):
    pods = Pods(cluster, prober)
    cluster.pods_helper = pods
    for i in range(30):
        pods.add(i % 3)
    pods.check_unique()
    pods.check_held()
    pods.check_owned_by_ec2()
    pods.check_reachable()  # full mesh, 870 pairs
    wait_for(lambda: settled(cluster), 20, "every daemon's pool within its targets")
    for n in range(3):
        st = cluster.status(n)["stats"]
        # WARM_ENI_TARGET=1 on m5.large (9 secondary IPs per ENI): at least 9 free, at most 17.
        assert 9 <= st["available"] + st["cooldown"] <= 2 * 9 - 1 or st["enis"] == 3, st


def test_200_delete_and_readd_cycles_leak_nothing(cluster, prober):
    rng = random.Random(SEED)
    print(f"seed={SEED}")
    pods = cluster.pods_helper
    for _ in range(200):
        name = rng.choice(list(pods.live))
        node = pods.live[name].node.index
        pods.delete(name)
        pods.add(node)
    print(f"ADD retries (code 11): {pods.retries}")
    pods.check_unique()
    pods.check_held()
    pods.check_owned_by_ec2()
    pods.check_reachable(sample=300, rng=rng)
    wait_for(lambda: settled(cluster), 30, "pools back within targets after churn")
    for n in range(3):
        ckpt = cluster.daemons[n].checkpoint()
        assert ckpt["version"] == "vpc-cni-ipam/1"
        assert {a["containerID"] for a in ckpt["allocations"]} == {
            p.name for p in pods.live.values() if p.node.index == n}
    # Nothing leaked into EC2 beyond what the pools hold.
    from cnikit.cluster import ec2_ips_of

    snap = cluster.cloud.gate.owners()
    for n in range(3):
        st = cluster.status(n)
        daemon_ips = {ip for e in st["enis"].values() for ip in e["ips"]}
        ec2_ips = {ip for ip, (_, _, primary) in ec2_ips_of(snap, cluster.fabric.nodes[n].instance_id).items()
                   if not primary}
        assert daemon_ips == ec2_ips, f"node {n}: daemon {len(daemon_ips)} vs EC2 {len(ec2_ips)}"


def test_sigkill_mid_add_then_restart_loses_and_duplicates_nothing(cluster, prober):
    from cnikit.fabric.cni import CniError, CniSandbox

    rng = random.Random(SEED + 1)
    print(f"seed={SEED + 1}")
    pods = cluster.pods_helper
    node = 1
    for round_ in range(3):
        failed: list[str] = []
        ok: list = []
        lock = threading.Lock()

        killed = threading.Event()

        def one(name, ok=ok, failed=failed, lock=lock, killed=killed):
            # Like kubelet, "try again later" (11) is retried until the kill: the last round's
            # released IPs may all still be cooling down when this storm starts.
            end = time.monotonic() + 20
            while True:
                try:
                    pod = cluster.add_pod(node, name)
                    break
                except CniError as e:
                    if e.code == 11 and not killed.is_set() and time.monotonic() < end:
                        time.sleep(0.1)
                        continue
                    with lock:
                        failed.append(f"{name}: {e}")
                    return
            pod.k8s_name = name
            with lock:
                ok.append(pod)

        names = [f"kill{round_}-{i}" for i in range(8)]
        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in threads:
            t.start()
        # Kill the moment k of this storm's allocations are checkpointed: those ADDs are
        # committed in the daemon but (mostly) not yet answered or wired.
        k = rng.randint(1, 4)
        prefix = f"kill{round_}-"

        def committed(prefix=prefix, k=k):
            rows = cluster.daemons[node].checkpoint()["allocations"]
            return len([a for a in rows if a["metadata"].get("k8sPodName", "").startswith(prefix)]) >= k

        try:
            wait_for(committed, 30, f"{k} allocations of round {round_}")
        except AssertionError:
            for t in threads:
                t.join(60)
            raise AssertionError(f"round {round_}: no {k} allocations; ADDs failed: {failed}; "
                                 f"daemon alive={cluster.daemons[node].alive()} log: {cluster.daemons[node].tail(20)}") from None
        killed.set()
        cluster.kill_daemon(node, signal.SIGKILL)
        for t in threads:
            t.join(60)
        cluster.restart_daemon(node)
        for pod in ok:
            pods.live[pod.k8s_name] = pod
            prober.add(pod.k8s_name, pod.ns.fd, pod.ip)
        # The runtime retries DEL for sandboxes whose ADD failed; the namespace is gone.
        st = cluster.status(node)
        live_ids = {p.name for p in pods.live.values()}
        for a in st["assignments"]:
            if a["containerID"] not in live_ids:
                sb = CniSandbox(cluster.netconf(node), [str(cluster.bin_dir)],
                                container_id=a["containerID"], netns_path="/run/netns/gone",
                                runner_ns=cluster.fabric.nodes[node].ns.path)
                sb.delete()
        print(f"round {round_}: {len(ok)} ADDs succeeded, {len(failed)} failed: {failed}; {cluster.status(node)['stats']}")
        pods.check_unique()
        pods.check_held()
        pods.check_owned_by_ec2()
    pods.check_reachable(sample=300, rng=rng)
