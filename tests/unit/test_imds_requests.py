"""The fault IMDS's per-request log (GET /requests on the control API, FaultClient.requests):
what each node asked, what it was served, which faults were in effect; and the kit's reading
of it: a full read of a node's ENI list is the evidence of a reconcile pass of any build."""

from __future__ import annotations

import pytest

from cnikit.cloud import Cloud
from cnikit.scenarios.blackbox import eni_list_reads
from fault_imds.client import FaultClient, FaultError
from fault_imds.handler import OBSERVER_HEADER
from fault_imds.request_log import RequestLog
from fault_imds.server import ImdsServer
from tests.unit.imds_support import MACS, Imds

SEED = 20261201


@pytest.fixture(scope="module")
def env():
    cloud = Cloud.start(ec2="moto", seed=SEED)
    topo = cloud.bootstrap(nodes=2)
    server = ImdsServer(ec2_endpoint=cloud.endpoint, seed=SEED).start()
    yield cloud, topo, server
    server.stop()
    cloud.stop()


@pytest.fixture
def fc(env):
    client = FaultClient(env[2].control_url)
    client.clear()
    yield client
    client.clear()


def _node(env, i: int = 0) -> Imds:
    return Imds(env[2].url, env[1].instances[i].instance_id)


def _full_read(imds: Imds) -> list[str]:
    """Read the ENI list as a daemon does: the MACs, then each MAC's addresses."""
    macs = [m.rstrip("/") for m in imds.lines(MACS) or [] if m]
    for mac in macs:
        imds.get(f"{MACS}{mac}/local-ipv4s")
        imds.get(f"{MACS}{mac}/ipv4-prefix")
    return macs


def test_each_request_is_logged_with_what_was_served(env, fc):
    iid = env[1].instances[0].instance_id
    start = fc.requests(since=0)["next"]
    node = _node(env)
    status, body, _ = node.get("/latest/meta-data/instance-id")
    assert (status, body) == (200, iid)
    node.get("/latest/meta-data/no-such-entry")
    page = fc.requests(since=start, instance_id=iid)
    got = [(r["method"], r["path"], r["status"], r["body"]) for r in page["requests"]]
    assert got[0] == ("GET", "/latest/meta-data/instance-id", 200, iid)
    assert got[1][:3] == ("GET", "/latest/meta-data/no-such-entry", 404)
    assert [r["seq"] for r in page["requests"]] == sorted(r["seq"] for r in page["requests"])
    assert page["next"] >= page["requests"][-1]["seq"]
    assert all(r["instance_id"] == iid and r["time"] > 0 and r["faults"] == []
               for r in page["requests"])
    # Nothing new since `next`.
    assert fc.requests(since=page["next"], instance_id=iid)["requests"] == []


def test_requests_are_kept_apart_per_instance(env, fc):
    a, b = (env[1].instances[i].instance_id for i in (0, 1))
    start = fc.requests()["next"]
    _node(env, 0).get("/latest/meta-data/mac")
    _node(env, 1).get("/latest/meta-data/mac")
    _node(env, 1).get("/latest/meta-data/mac")
    assert len(fc.requests(since=start, instance_id=a)["requests"]) == 1
    assert len(fc.requests(since=start, instance_id=b)["requests"]) == 2
    assert len(fc.requests(since=start)["requests"]) == 3


def test_faults_in_effect_are_named_and_a_drop_is_status_0(env, fc):
    iid = env[1].instances[0].instance_id
    start = fc.requests()["next"]
    err = fc.error(status=503, instance_id=iid)
    node = _node(env)
    assert node.get("/latest/meta-data/instance-id")[0] == 503
    fc.remove(err)
    drop = fc.drop(instance_id=iid)
    with pytest.raises(Exception):  # noqa: B017,PT011 - the connection closes, no answer
        node.get("/latest/meta-data/instance-id")
    fc.remove(drop)
    rs = fc.requests(since=start, instance_id=iid)["requests"]
    assert (rs[0]["status"], rs[0]["faults"]) == (503, [str(err)])
    assert (rs[1]["status"], rs[1]["faults"], rs[1]["body"]) == (0, [str(drop)], "")


def test_the_kits_own_reads_are_marked(env, fc):
    start = fc.requests()["next"]
    node = _node(env)
    node.request("GET", "/latest/meta-data/mac", {OBSERVER_HEADER: "1"})
    node.get("/latest/meta-data/mac")
    rs = fc.requests(since=start)["requests"]
    assert [r.get("observer", False) for r in rs] == [True, False]


def test_limit_pages_through_the_log(env, fc):
    start = fc.requests()["next"]
    node = _node(env)
    for _ in range(5):
        node.get("/latest/meta-data/mac")
    first = fc.requests(since=start, limit=2)
    assert len(first["requests"]) == 2 and first["next"] == first["requests"][-1]["seq"]
    rest = fc.requests(since=first["next"])
    assert len(rest["requests"]) == 3


@pytest.mark.parametrize("query", ["since=-1", "since=x", "limit=0", "limit=two"])
def test_bad_query_is_a_400_with_one_line(env, query):
    fc = FaultClient(env[2].control_url)
    status, payload = fc._call("GET", f"/requests?{query}")
    assert status == 400 and "\n" not in payload["error"] and payload["error"]
    with pytest.raises(FaultError):
        fc._ok("GET", f"/requests?{query}")


def test_the_ring_is_bounded():
    log = RequestLog(maxlen=3)
    for i in range(5):
        log.add({"instance_id": "i-1", "n": i})
    out, nxt = log.since(0)
    assert [e["n"] for e in out] == [2, 3, 4] and nxt == 5
    assert [e["n"] for e in log.since(3)[0]] == [3, 4]
    assert log.since(5) == ([], 5)


def test_a_full_read_of_the_eni_list_counts_as_one_reconcile_pass(env, fc):
    iid = env[1].instances[0].instance_id
    start = fc.requests()["next"]
    node = _node(env)
    macs = _full_read(node)
    assert macs, "the node has ENIs"
    rs = fc.requests(since=start, instance_id=iid)["requests"]
    assert eni_list_reads(rs) == 1
    _full_read(node)
    assert eni_list_reads(fc.requests(since=start, instance_id=iid)["requests"]) == 2


def test_a_partial_read_or_a_failed_listing_is_no_reconcile_pass(env, fc):
    iid = env[1].instances[0].instance_id
    start = fc.requests()["next"]
    node = _node(env)
    macs = [m.rstrip("/") for m in node.lines(MACS) if m]  # the list, no addresses read
    with fc.error(status=500, instance_id=iid):
        _full_read(node)
    # The kit's own reads of the ENI's addresses never complete the node's read.
    for mac in macs:
        node.request("GET", f"{MACS}{mac}/local-ipv4s", {OBSERVER_HEADER: "1"})
    rs = fc.requests(since=start, instance_id=iid)["requests"]
    assert macs and eni_list_reads(rs) == 0
    node.get(f"{MACS}{macs[0]}/local-ipv4s")
    assert eni_list_reads(fc.requests(since=start, instance_id=iid)["requests"]) == (len(macs) == 1)


def test_a_caller_that_hung_up_is_still_told_by_its_source_address(env):
    """A busy IMDS may serve a request after its caller timed out and closed the connection
    (the fence held it): the caller is still the node whose ENI holds the source address,
    never the host (CI logged such a daemon read as an unattributed host request)."""
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    cloud, topo, server = env
    node = topo.instances[0]
    source = cloud.gate.owners().enis[node.primary_eni_id].ips[0]
    transport = mock.Mock()
    transport.get_extra_info.return_value = (source, 40000)
    request = make_mocked_request("GET", "/latest/meta-data/instance-id", transport=transport)
    request.protocol.transport = None  # the caller hung up
    assert server.handler.caller(request) == node.instance_id
