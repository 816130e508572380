"""The raw rtnetlink layer, in-process namespaces and the pod wiring, without EC2."""

from __future__ import annotations

import os
import socket

import pytest

from cnikit.fabric import netns, wiring
from cnikit.fabric.netlink import Netlink, NetlinkError
from cnikit.runtime import Run
from tests.integration.conftest import needs_root

pytestmark = [pytest.mark.root, needs_root]


@pytest.fixture
def live_run():
    """A claimed run id: a namespace named with an unclaimed one is a dead run's to every
    other run's cleanup, which removes it and kills what is in it (this test process, while
    its thread is inside: a make test worker died of it)."""
    run = Run.claim()
    yield run.run_id
    run.close()


@pytest.fixture
def ns_pair(live_run):
    """Two fresh namespaces with a netlink socket each, removed afterwards."""
    rid = live_run
    made = []

    def make(suffix):
        name = f"ck-{rid}-t{suffix}"
        with netns.created(name) as fd:
            nl = Netlink()
        made.append((name, fd, nl))
        return name, fd, nl

    yield make("a"), make("b")
    for name, fd, nl in made:
        nl.close()
        os.close(fd)
        netns.remove(name)


def udp_roundtrip(src_fd, dst_fd, dst_ip, timeout=1.0) -> tuple[str, bytes] | None:
    with netns.entered(dst_fd):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(src_fd):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("0.0.0.0", 9999))
        rx.settimeout(timeout)
        tx.sendto(b"ping", (dst_ip, 9999))
        try:
            data, addr = rx.recvfrom(64)
        except TimeoutError:
            return None
        return addr[0], data


def test_namespace_create_and_remove_leaves_nothing(live_run):
    name = f"ck-{live_run}-tx"
    home = os.stat("/proc/thread-self/ns/net").st_ino
    fd = netns.create(name)
    try:
        assert netns.exists(name)
        with pytest.raises(FileExistsError):
            netns.create(name)
        # The thread came back to its own namespace.
        assert os.stat("/proc/thread-self/ns/net").st_ino == home
        assert os.fstat(fd).st_ino != home
    finally:
        os.close(fd)
        assert netns.remove(name)
    assert not netns.exists(name)
    assert netns.remove(name) is False  # idempotent


def test_veth_into_other_namespace_with_addresses_routes_rules_neighbours(ns_pair):
    (_, fa, a), (_, fb, b) = ns_pair
    a.veth_add("va", "vb", peer_ns_fd=fb, mac="02:00:00:00:00:01", peer_mac="02:00:00:00:00:02",
               index=10)
    assert a.link("vb") is None and b.link("vb").mac == "02:00:00:00:00:02"
    ia, ib = a.link_index("va"), b.link_index("vb")
    a.link_set(ia, up=True)
    b.link_set(ib, up=True)
    assert a.wait_oper_up("va") and b.wait_oper_up("vb")  # else the first packets drop
    a.addr_add(ia, "10.9.0.1", 24, noprefixroute=True)
    a.addr_add(ia, "10.9.0.1", 24, noprefixroute=True)  # the same address again is fine
    b.addr_add(ib, "10.9.0.2", 32)
    a.route_replace("10.9.0.2/32", oif=ia)
    a.neigh_replace(ia, "10.9.0.2", "02:00:00:00:00:02")
    b.route_replace("10.9.0.1/32", oif=ib)
    b.route_replace("default", gateway="10.9.0.1", oif=ib, onlink=True)
    b.route_replace("10.50.0.0/28", gateway="10.9.0.1", oif=ib, table=7, onlink=True)
    assert a.rule_add(512, 254, dst="10.9.0.2/32") is True
    assert a.rule_add(512, 254, dst="10.9.0.2/32") is False
    assert a.rule_add(1536, 3, src="10.9.0.2/32") is True

    assert [(x.ip, x.prefixlen) for x in a.addrs(ia)] == [("10.9.0.1", 24)]
    routes_b = {r.dst: r for r in b.routes(None)}
    assert routes_b["default"].gateway == "10.9.0.1" and routes_b["default"].onlink
    assert routes_b["10.50.0.0/28"].table == 7
    rules = {(r.priority, r.src, r.dst, r.table) for r in a.rules()}
    assert (512, None, "10.9.0.2/32", 254) in rules and (1536, "10.9.0.2/32", None, 3) in rules
    neigh = [n for n in a.neighs(ia) if n.ip == "10.9.0.2"]
    assert neigh and neigh[0].mac == "02:00:00:00:00:02" and neigh[0].state == 0x80
    assert udp_roundtrip(fb, fa, "10.9.0.1") == ("10.9.0.2", b"ping")

    assert a.rule_del(1536, 3, src="10.9.0.2/32") is True
    assert a.rule_del(1536, 3, src="10.9.0.2/32") is False
    assert a.route_del("10.9.0.2/32") is True and a.route_del("10.9.0.2/32") is False
    assert a.link_del(name="va") is True
    assert a.link_del(name="va") is False
    assert b.link("vb") is None  # the peer went with it


def test_kernel_refusal_is_a_netlink_error_with_errno(ns_pair):
    (_, _, a), _ = ns_pair
    with pytest.raises(NetlinkError) as e:
        a.route_replace("10.1.0.0/24", gateway="10.2.0.1")  # gateway not reachable
    assert e.value.errno and "route 10.1.0.0/24" in str(e.value)
    with pytest.raises(NetlinkError):
        a.veth_add("x" * 16, "y")  # name too long


def test_wire_gives_the_pod_upstreams_data_plane_and_unwire_is_idempotent(ns_pair):
    (_, node_fd, node), (pod_name, pod_fd, pod) = ns_pair
    veth = wiring.host_veth_name(f"/run/netns/{pod_name}", pod_name)
    assert veth.startswith("eni") and len(veth) == 14
    node.link_set(name="lo", up=True)
    node.addr_add(node.link_index("lo"), "10.0.1.4", 32)
    w = wiring.wire(node, pod, pod_fd, "10.0.1.20", veth)

    view = wiring.pod_view(pod)
    assert view["ips"] == ["10.0.1.20/32"] and view["gateway"] == wiring.POD_GATEWAY
    assert view["mac"] == w.pod_mac and view["up"]
    gw_neigh = [n for n in pod.neighs() if n.ip == wiring.POD_GATEWAY]
    assert gw_neigh[0].mac == w.host_mac and gw_neigh[0].state == 0x80
    hidx = node.link_index(veth)
    assert any(r.dst == "10.0.1.20/32" and r.oif == hidx for r in node.routes())
    assert any(r.priority == 512 and r.dst == "10.0.1.20/32" for r in node.rules())
    assert udp_roundtrip(pod_fd, node_fd, "10.0.1.4") == ("10.0.1.20", b"ping")
    assert udp_roundtrip(node_fd, pod_fd, "10.0.1.20") is not None

    wiring.unwire(node, "10.0.1.20", veth, 0)
    wiring.unwire(node, "10.0.1.20", veth, 0)  # nothing left: still fine
    wiring.unwire(node, "10.0.1.20", veth, None)
    assert node.link(veth) is None and pod.link("eth0") is None
    assert not any(r.dst == "10.0.1.20/32" for r in node.rules())


def test_wire_on_a_secondary_eni_uses_its_table(ns_pair):
    (_, _, node), (pod_name, pod_fd, pod) = ns_pair
    node.veth_add("eth2", "peer2", index=20)
    node.link_set(name="eth2", up=True)
    w = wiring.wire(node, pod, pod_fd, "10.0.1.30", "enitest0000001", device_index=2,
                    router="10.0.1.1")
    assert w.table == 3
    rules = {(r.priority, r.src, r.dst, r.table) for r in node.rules()}
    assert (1536, "10.0.1.30/32", None, 3) in rules and (512, None, "10.0.1.30/32", 254) in rules
    table3 = {r.dst: r for r in node.routes(3)}
    assert table3["default"].gateway == "10.0.1.1" and "10.0.1.1/32" in table3
    wiring.unwire(node, "10.0.1.30", "enitest0000001", None)
    assert not any(r.priority == 1536 for r in node.rules())


def test_failed_wire_leaves_nothing_behind(ns_pair):
    (_, _, node), (_, pod_fd, pod) = ns_pair
    with pytest.raises(NetlinkError):
        # No eth3 in the node: setting up table 4 fails after the veth was made.
        wiring.wire(node, pod, pod_fd, "10.0.1.40", "enitest0000002", device_index=3,
                    router="10.0.1.1")
    assert node.link("enitest0000002") is None and pod.link("eth0") is None
    assert not any(r.dst == "10.0.1.40/32" for r in node.rules())


def test_importing_wiring_stays_cheap():
    import subprocess
    import sys

    code = ("import sys, cnikit.fabric.wiring, cnikit.fabric.netlink; "
            "print(','.join(m for m in ('pyroute2', 'boto3', 'botocore', 'click', 'aiohttp') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_batch_sends_once_and_raises_the_first_refusal(ns_pair):
    (_, _, a), _ = ns_pair
    a.link_set(name="lo", up=True)
    lo = a.link_index("lo")
    with a.batch():
        a.addr_add(lo, "10.8.0.1", 32)
        a.route_replace("10.8.1.0/24", oif=lo)
        assert a.link("lo") is not None  # lookups inside a batch are answered at once
        assert a.rule_add(700, 254, dst="10.8.1.0/24")
        assert a.rule_add(700, 254, dst="10.8.1.0/24")  # EEXIST tolerated, even batched
    assert any(r.dst == "10.8.1.0/24" for r in a.routes())
    with pytest.raises(NetlinkError, match="route 10.8.2.0/24"):
        with a.batch():
            a.route_replace("10.8.2.0/24", gateway="10.99.0.1")  # unreachable gateway
            a.route_replace("10.8.3.0/24", oif=lo)  # still applied: the kernel goes on
    assert any(r.dst == "10.8.3.0/24" for r in a.routes())


def test_an_add_racing_an_eni_attach_asks_to_try_again(ns_pair):
    """eth1 is there but still down (an ENI just attached): the ADD must answer CNI code 11
    (try again later), not fail the pod with "network is down"."""
    from cnikit.daemon.podnet import PodNet, PodNetError

    (node_name, node_fd, node_nl), (pod_name, _pod_fd, _pod_nl) = ns_pair
    node_nl.veth_add("eth1", "eth1-peer")  # both ends stay down
    assert not node_nl.link("eth1").up
    with netns.entered(node_fd):
        net = PodNet(eni_link_wait=0.3)
        with pytest.raises(PodNetError) as e:
            net.add(f"/run/netns/{pod_name}", "10.0.1.20", "eni0123456789a", "eth0",
                    device_index=1, router="10.0.1.1")
    assert e.value.code == 11, e.value
    assert "never came up" in str(e.value)
