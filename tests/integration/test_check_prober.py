"""The prober process on real namespaces: pods added and removed at run time, bad
targets reported, failures only after consecutive timeouts, death with its parent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from cnikit.check.prober import Prober, ProbeTarget
from cnikit.fabric import ec2ops
from tests.integration.conftest import needs_root, wait_until

pytestmark = [pytest.mark.root, needs_root]


def target(pod) -> ProbeTarget:
    return ProbeTarget(pod.name, pod.path, pod.ip)


def test_pods_come_and_go_at_run_time(make_fabric, fab_cloud):
    fabric = make_fabric(nodes=2)
    pods = [fabric.add_pod(n, ip, dev) for n in range(2)
            for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 3)]
    events: list[dict] = []
    with Prober(events.append, threads=2) as prober:
        assert prober.add([target(p) for p in pods[:4]]) == {}
        errors = prober.add([ProbeTarget("ghost", "/run/netns/ck-nope0-x", "10.9.9.9")])
        assert "ghost" in errors and "No such file" in errors["ghost"]
        wait_until(lambda: any(e["ev"] == "stats" and e["ok"] > 0 for e in events), 3)
        prober.add([target(p) for p in pods[4:]])
        wait_until(lambda: (s := prober.last_stats) and s["pods"] == 6 and s["stale_count"] == 0
                   and s["ok"] >= 6 * 5, 4, what="six pods probed")
        gone = pods[0]
        prober.remove([gone.name])
        fabric.delete_pod(gone)  # its namespace goes: no failure is reported for it
        n = len(events)
        # Five pods over two shards: every one still a destination within the second.
        wait_until(lambda: any(e["ev"] == "stats" for e in events[n:]) and
                   prober.last_stats["pods"] == 5, 3)
        wait_until(lambda: (s := prober.last_stats)["ok"] >= 5 * 5 and s["stale_count"] == 0
                   and s["threads"] == 2, 3, what="five pods probed by two threads")
        assert not [e for e in events if e["ev"] in ("fail", "wrong")]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_pair_fails_only_after_consecutive_timeouts_and_recovers(make_fabric, fab_cloud,
                                                                   threads):
    fabric = make_fabric(nodes=2)
    [(ip_a, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 0, 1)
    [(ip_b, _)] = ec2ops.assign_pod_ips(fab_cloud, fabric, 1, 1)
    a, b = fabric.add_pod(0, ip_a), fabric.add_pod(1, ip_b)
    events: list[dict] = []
    with Prober(events.append, fail_after=3, timeout=0.005, threads=threads) as prober:
        prober.add([target(a), target(b)])
        wait_until(lambda: prober.last_stats.get("ok", 0) > 0, 3)
        eni = fabric.topo.instances[1].primary_eni_id
        fab_cloud.client().unassign_private_ip_addresses(NetworkInterfaceId=eni,
                                                         PrivateIpAddresses=[ip_b])
        fails = wait_until(lambda: [e for e in events if e["ev"] == "fail"], 2, 0.005)
        assert {(f["src"], f["dst"]) for f in fails} <= {(a.name, b.name), (b.name, a.name)}
        # Both directions fail (with two threads each is probed by a different shard).
        wait_until(lambda: {(f["src"], f["dst"]) for f in events if f["ev"] == "fail"}
                   == {(a.name, b.name), (b.name, a.name)}, 2, 0.005, what="both directions")
        assert fails[0]["reason"] == "timeout"
        fab_cloud.client().assign_private_ip_addresses(NetworkInterfaceId=eni,
                                                       PrivateIpAddresses=[ip_b])
        wait_until(lambda: len([e for e in events if e["ev"] == "recover"]) ==
                   len([e for e in events if e["ev"] == "fail"]), 2, 0.005, what="recovery")


def test_stopping_a_busy_prober_is_clean(make_fabric, fab_cloud):
    """Stopped while both threads probe flat out, the process exits 0 with nothing on
    stderr, every time (a shard closing its wake-up fd early once made the stop raise)."""
    fabric = make_fabric(nodes=2)
    pods = [fabric.add_pod(n, ip, dev) for n in range(2)
            for ip, dev in ec2ops.assign_pod_ips(fab_cloud, fabric, n, 2)]
    add = {"op": "add", "pods": [{"id": i + 1, "netns": p.path, "ip": p.ip}
                                 for i, p in enumerate(pods)]}
    for _ in range(15):
        proc = subprocess.Popen([sys.executable, "-m", "cnikit.check.prober_proc",
                                 "--threads", "2"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdin.write((json.dumps({"op": "config", "interval": 0}) + "\n" +
                          json.dumps(add) + "\n").encode())
        proc.stdin.flush()
        added = next((line for line in proc.stdout if b'"ev":"added"' in line), None)
        assert added, proc.stderr.read().decode()
        proc.stdin.write(b'{"op": "stop"}\n')
        proc.stdin.flush()
        _out, err = proc.communicate(timeout=20)
        assert (proc.returncode, err.decode()) == (0, "")


def test_the_prober_dies_with_its_parent():
    code = textwrap.dedent("""
        import sys, time
        from cnikit.check.prober import Prober
        p = Prober().start()
        print(p.proc.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert os.path.exists(f"/proc/{child}")
    parent.kill()
    parent.wait(5)

    def gone() -> bool:
        try:
            return open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True
    wait_until(gone, 5, what="the prober to exit")
