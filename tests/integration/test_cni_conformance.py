"""cnikit-cni as a runtime drives it (CNI spec 1.0.0): result schema, CHECK on a good and a
broken pod, DEL twice, garbage stdin, unknown command, rollback, both wiring modes."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import jsonschema
import pytest

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

CIDR4 = r"^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$"
IP4 = r"^(\d{1,3}\.){3}\d{1,3}$"
MAC = r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$"

# The spec's success result (SPEC.md, "Success"), as a JSON schema.
RESULT_SCHEMA = {
    "type": "object",
    "required": ["cniVersion", "ips"],
    "properties": {
        "cniVersion": {"const": "1.0.0"},
        "interfaces": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1},
                           "mac": {"type": "string", "pattern": MAC},
                           "mtu": {"type": "integer"},
                           "sandbox": {"type": "string"}},
        }},
        "ips": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["address"],
            "properties": {"address": {"type": "string", "pattern": CIDR4},
                           "gateway": {"type": "string", "pattern": IP4},
                           "interface": {"type": "integer", "minimum": 0}},
            "not": {"required": ["version"]},  # "version" was dropped in 1.0.0
        }},
        "routes": {"type": "array", "items": {
            "type": "object", "required": ["dst"],
            "properties": {"dst": {"type": "string", "pattern": CIDR4},
                           "gw": {"type": "string", "pattern": IP4}},
        }},
        "dns": {"type": "object", "properties": {
            "nameservers": {"type": "array", "items": {"type": "string"}},
            "domain": {"type": "string"},
            "search": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "array", "items": {"type": "string"}},
        }},
    },
}

ERROR_SCHEMA = {
    "type": "object",
    "required": ["cniVersion", "code", "msg"],
    "properties": {"cniVersion": {"type": "string"}, "code": {"type": "integer", "minimum": 1},
                   "msg": {"type": "string", "minLength": 1, "pattern": r"^[^\n]*$"},
                   "details": {"type": "string"}},
}


@pytest.fixture(scope="module")
def cluster():
    from cnikit.cluster import CniCluster

    with CniCluster(nodes=1, profile="hardened", scale=0.05) as c:
        yield c


class Runtime:
    """Executes the plugin inside the node namespace the way a container runtime does."""

    def __init__(self, cluster):
        self.c = cluster
        self.n = 0

    def new_netns(self) -> str:
        from cnikit.fabric import netns

        self.n += 1
        name = f"ck-{self.c.fabric.rid}-n0-c{self.n}"
        os.close(netns.create(name))
        return f"/run/netns/{name}"

    def run(self, command, conf, cid="c1", netns="", ifname="eth0", pod="p1", stdin=None):
        env = {"PATH": os.environ["PATH"], "CNI_COMMAND": command, "CNI_CONTAINERID": cid,
               "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_PATH": str(self.c.bin_dir),
               "CNI_ARGS": f"K8S_POD_NAMESPACE=conf;K8S_POD_NAME={pod}"}
        data = stdin if stdin is not None else json.dumps(conf).encode()
        p = subprocess.run(["nsenter", f"--net={self.c.fabric.nodes[0].ns.path}", "--",
                            str(self.c.bin_dir / "cnikit-cni")], input=data, env=env,
                           capture_output=True, timeout=60)
        assert p.stderr == b"", p.stderr
        out = json.loads(p.stdout) if p.stdout.strip() else None
        return p.returncode, out


@pytest.fixture(scope="module")
def rt(cluster):
    return Runtime(cluster)


def held(cluster, cid):
    return {a["containerID"]: a["ip"] for a in cluster.status(0)["assignments"]}.get(cid)


@pytest.mark.parametrize("wiring", ["daemon", "plugin"])
def test_add_check_del_lifecycle(cluster, rt, wiring):
    conf = cluster.netconf(0, wiring=wiring)
    ns, cid = rt.new_netns(), f"life-{wiring}"
    rc, result = rt.run("ADD", conf, cid, ns, pod=cid)
    assert rc == 0, result
    jsonschema.validate(result, RESULT_SCHEMA)
    ip = result["ips"][0]["address"].split("/")[0]
    assert result["ips"][0]["interface"] == 1 and result["interfaces"][1]["sandbox"] == ns
    assert held(cluster, cid) == ip
    rc, out = rt.run("CHECK", {**conf, "prevResult": result}, cid, ns, pod=cid)
    assert (rc, out) == (0, None)
    rc, out = rt.run("DEL", {**conf, "prevResult": result}, cid, ns, pod=cid)
    assert (rc, out) == (0, None) and held(cluster, cid) is None
    rc, out = rt.run("DEL", conf, cid, ns, pod=cid)
    assert (rc, out) == (0, None), "a second DEL must succeed"


def test_check_on_a_broken_pod_fails(cluster, rt):
    from cnikit.fabric import wiring

    conf = cluster.netconf(0)
    ns, cid = rt.new_netns(), "broken"
    rc, result = rt.run("ADD", conf, cid, ns, pod=cid)
    assert rc == 0
    ip = result["ips"][0]["address"].split("/")[0]
    nl = wiring.netlink_in(ns)
    try:
        nl.addr_del(nl.link_index("eth0"), ip, 32)
    finally:
        nl.close()
    rc, err = rt.run("CHECK", {**conf, "prevResult": result}, cid, ns, pod=cid)
    assert rc != 0
    jsonschema.validate(err, ERROR_SCHEMA)
    assert ip in err["msg"]
    # A prevResult naming another IP fails too.
    other = json.loads(json.dumps(result))
    other["ips"][0]["address"] = "10.0.1.250/32"
    rc, err = rt.run("CHECK", {**conf, "prevResult": other}, cid, ns, pod=cid)
    assert rc != 0 and "10.0.1.250" in err["msg"]
    rc, err = rt.run("CHECK", conf, cid, ns, pod=cid)
    assert rc != 0 and err["code"] == 7 and "prevResult" in err["msg"]
    assert rt.run("DEL", conf, cid, ns, pod=cid)[0] == 0


@pytest.mark.parametrize("stdin,code", [
    (b"garbage", 6), (b"", 6), (b"[1, 2]", 6), (b'{"name": "x"}', 7),
    (b'{"cniVersion": "9.9.9", "name": "x"}', 1),
    (b'{"cniVersion": "1.0.0", "name": "x", "mtu": "big"}', 2),
])
def test_bad_stdin_gets_error_json(cluster, rt, stdin, code):
    rc, err = rt.run("ADD", None, "bad", rt.new_netns(), stdin=stdin)
    assert rc != 0
    jsonschema.validate(err, ERROR_SCHEMA)
    assert err["code"] == code, err


def test_unknown_command_and_version(cluster, rt):
    rc, err = rt.run("FROB", cluster.netconf(0), "x", rt.new_netns())
    assert rc != 0 and err["code"] == 4
    jsonschema.validate(err, ERROR_SCHEMA)
    rc, out = rt.run("VERSION", None, stdin=b"{}")
    assert rc == 0 and "1.0.0" in out["supportedVersions"]


def test_add_into_a_missing_namespace_rolls_back(cluster, rt):
    before = cluster.status(0)["stats"]["assigned"]
    rc, err = rt.run("ADD", cluster.netconf(0), "ghost", "/run/netns/does-not-exist")
    assert rc != 0 and err["code"] == 3, err
    assert held(cluster, "ghost") is None
    assert cluster.status(0)["stats"]["assigned"] == before


def test_daemon_down_is_try_again_and_leaves_nothing(cluster, rt):
    ns = rt.new_netns()
    rc, err = rt.run("ADD", {**cluster.netconf(0), "daemonSocket": "/run/nowhere.sock"}, "down", ns)
    assert rc != 0 and err["code"] == 11
    from cnikit.fabric import wiring

    nl = wiring.netlink_in(ns)
    try:
        assert nl.link("eth0") is None
    finally:
        nl.close()


def test_del_of_a_sandbox_the_daemon_forgot_still_unwires(cluster, rt):
    """After a force-removal (or a lost checkpoint) the daemon no longer knows the pod's IP;
    DEL must still take its route and rules off the node."""
    from cnikit.fabric import wiring

    conf = cluster.netconf(0)
    ns, cid = rt.new_netns(), "forgotten"
    rc, result = rt.run("ADD", conf, cid, ns, pod=cid)
    assert rc == 0
    ip = result["ips"][0]["address"].split("/")[0]
    # The daemon loses the allocation (its checkpoint row is gone when it restarts).
    d = cluster.daemons[0]
    d.kill(signal.SIGKILL)
    path = d.state_dir / "ipam.json"
    doc = json.loads(path.read_text())
    doc["allocations"] = [a for a in doc["allocations"] if a["containerID"] != cid]
    path.write_text(json.dumps(doc))
    cluster.restart_daemon(0)
    assert held(cluster, cid) is None
    node_nl = cluster.fabric.nodes[0].ns.nl
    assert any(r.priority == wiring.RULE_TO_POD and r.dst == f"{ip}/32" for r in node_nl.rules())
    rc, out = rt.run("DEL", conf, cid, ns, pod=cid)
    assert (rc, out) == (0, None)
    assert not any(r.dst == f"{ip}/32" for r in node_nl.rules())
    assert not any(r.dst == f"{ip}/32" for r in node_nl.routes())


def test_same_pod_name_readded_right_after_del(cluster, rt):
    """A StatefulSet-style pod comes back under the same name (same host veth name) in a new
    namespace right after DEL, while earlier DELs still queue their deferred veth removals:
    the old veth's removal must not take the new one. Straight on the daemon's socket."""
    import time

    from cnikit.daemon.server import request
    from cnikit.fabric import wiring

    sock = cluster.daemons[0].socket_path
    node_nl = cluster.fabric.nodes[0].ns.nl

    def req(cmd, name, cid, ns):
        return request(sock, {"cmd": cmd, "network": "aws-cni", "ifName": "eth0",
                              "podNamespace": "conf", "podName": name, "containerID": cid,
                              "netns": ns})

    others = [(f"burst-{i}", rt.new_netns()) for i in range(6)]
    for name, ns in others:
        assert req("add", name, name, ns)["ok"]
    old_ns, new_ns = rt.new_netns(), rt.new_netns()
    assert req("add", "sts-0", "sts-old", old_ns)["ok"]
    for name, ns in others:  # a backlog of deferred veth removals (~35 ms each)
        assert req("del", name, name, ns)["ok"]
    assert req("del", "sts-0", "sts-old", old_ns)["ok"]
    r = req("add", "sts-0", "sts-new", new_ns)
    assert r["ok"], r
    gone = [wiring.host_veth_name("conf", name) for name, _ in others]
    end = time.monotonic() + 10
    while any(node_nl.link(v) for v in gone):  # the backlog drains
        assert time.monotonic() < end, "deferred veth removals never ran"
        time.sleep(0.02)
    # A negative check: give the removal queued behind them the time to (wrongly) act.
    time.sleep(0.1)
    chk = req("check", "sts-0", "sts-new", new_ns)
    assert chk["ok"], chk
    assert req("del", "sts-0", "sts-new", new_ns)["ok"]


PTP = "/usr/lib/cni/ptp"


def run_ptp(command, conf, cid, ifname, data_dir):
    """The reference ptp plugin (libcni's skel) with the same input; its validation
    answers before it touches a namespace (CNI_NETNS names none)."""
    conf = {**conf, "type": "ptp", "ipam": {"type": "host-local", "subnet": "10.255.0.0/24",
                                            "dataDir": str(data_dir)}}
    env = {"PATH": os.environ["PATH"], "CNI_COMMAND": command, "CNI_CONTAINERID": cid,
           "CNI_NETNS": "/run/netns/cnikit-no-such-netns", "CNI_IFNAME": ifname,
           "CNI_PATH": "/usr/lib/cni"}
    p = subprocess.run([PTP], input=json.dumps(conf).encode(), env=env, capture_output=True,
                       timeout=30)
    return p.returncode, json.loads(p.stdout)


@pytest.mark.skipif(not os.path.exists(PTP), reason="no reference ptp (apt package "
                    "containernetworking-plugins)")
@pytest.mark.parametrize("command,change,cid,ifname", [
    ("ADD", {"name": None}, "side", "eth0"),
    ("ADD", {"name": ""}, "side", "eth0"),
    ("ADD", {"name": "aws cni"}, "side", "eth0"),
    ("DEL", {"name": None}, "side", "eth0"),
    ("ADD", {}, "c/1", "eth0"),
    ("ADD", {}, "c 1", "eth0"),
    ("ADD", {}, "-c1", "eth0"),
    ("ADD", {}, "c:1", "eth0"),
    ("DEL", {}, "c 1", "eth0"),
    ("ADD", {}, "side", "eth0:1"),
    ("ADD", {}, "side", "e" * 16),
    ("CHECK", {"cniVersion": "0.3.1"}, "side", "eth0"),
    ("CHECK", {"cniVersion": "0.3.0"}, "side", "eth0"),
    ("ADD", {"cniVersion": "9.9.9"}, "side", "eth0"),
])
def test_validation_answers_as_ptp_does(cluster, rt, tmp_path, command, change, cid, ifname):
    conf = {**cluster.netconf(0), **change}
    if command == "CHECK":
        conf["prevResult"] = {"cniVersion": conf["cniVersion"], "ips": [
            {"version": "4", "address": "10.0.1.9/32"}]}
    conf = {k: v for k, v in conf.items() if v is not None}
    before = cluster.status(0)["stats"]["assigned"]
    ptp_rc, ptp = run_ptp(command, conf, cid, ifname, tmp_path / "host-local")
    rc, ours = rt.run(command, conf, cid, rt.new_netns(), ifname=ifname)
    assert ptp_rc != 0 and rc != 0, (ptp, ours)
    jsonschema.validate(ours, ERROR_SCHEMA)
    assert ours["code"] == ptp["code"], (ours, ptp)
    assert cluster.status(0)["stats"]["assigned"] == before
