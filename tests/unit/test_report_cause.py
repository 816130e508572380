"""A violation's chain back to the first cause the record shows: the fault, what IMDS served
the node before the daemon acted, the daemon's action, EC2's reaction, the symptom; from the
record alone (any build), with the reference daemon's decisions when the run logged them."""

from __future__ import annotations

import json

from cnikit.report import build, write_report
from cnikit.report.summary import sentence
from tests.unit.test_report import ENI, I1, MAC, T0, story

NODES = [{"index": 0, "name": "node-0", "instance_id": I1,
          "enis": [{"eni_id": ENI, "mac": MAC, "device_index": 0, "primary_ip": "10.0.1.10"}]}]
STALE = ["10.0.1.10", "10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14"]


def _p1_lost(doc: dict) -> dict:
    return next(v for v in doc["violations"] if v["kind"] == "unreachable" and v["subject"] == "p1")


def _steps(links: list[dict]) -> list[str]:
    return [x["step"] for x in links]


def test_any_build_gets_a_chain_from_the_record_alone():
    """No decision log, no per-request IMDS log: the chain comes from the IMDS's change log,
    the monitor's view of the datastore, the gate's audit and the checkers."""
    doc, tl = build(story())
    v = _p1_lost(doc)
    links = v["chain"]
    assert _steps(links) == ["fault", "imds", "daemon", "ec2-call", "ec2", "symptom"], links
    fault, imds, daemon, call, ec2, symptom = links
    assert fault["at"] == "t=+2.00s" and "IMDS stale" in fault["text"] and ENI in fault["text"]
    assert "missing .12" not in imds["text"]  # IMDS still listed .12 ...
    assert "missing .15" in imds["text"]  # ... and not the warm IP EC2 had added
    assert "lengths equal (1 + 4 = 5), contents differ" in imds["text"]
    assert daemon["at"] == "t=+6.00s" and "dropped 10.0.1.12" in daemon["text"]
    assert call["at"] == "t=+9.95s" and "UnassignPrivateIpAddresses" in call["text"]
    assert "the daemon on i-0abc" in call["text"]
    assert ec2["text"] == "EC2: 10.0.1.12 held by no instance"
    assert symptom["text"].startswith("pod p1 (10.0.1.12) went dark")
    line = sentence(tl, v)
    assert "because IP 10.0.1.12 was removed from ENI eni-0aaa in EC2" in line
    assert "; root cause: t=+2.00s fault: IMDS stale" in line
    assert line.index("IMDS stale") < line.index("IMDS had served") < line.index("dropped 10.0.1.12")


def test_the_last_imds_read_before_the_daemon_acted_comes_from_the_request_log():
    r = story()
    path = f"/latest/meta-data/network/interfaces/macs/{MAC}/local-ipv4s"
    r["imds_requests"] = [
        {"seq": 1, "time": T0 + 1, "instance_id": I1, "method": "GET", "path": path,
         "status": 200, "body": "\n".join(STALE), "faults": []},
        {"seq": 2, "time": T0 + 5.5, "instance_id": I1, "method": "GET", "path": path,
         "status": 200, "body": "\n".join(STALE), "faults": ["f1"]},
        # the kit's own read and another node's read are not the node's
        {"seq": 3, "time": T0 + 5.8, "instance_id": I1, "method": "GET", "path": path,
         "status": 200, "body": "10.0.1.10", "faults": [], "observer": True},
        {"seq": 4, "time": T0 + 5.9, "instance_id": "i-other", "method": "GET",
         "path": path, "status": 200, "body": "10.9.0.1", "faults": []},
        # after the daemon acted: not the read it acted on
        {"seq": 5, "time": T0 + 7, "instance_id": I1, "method": "GET", "path": path,
         "status": 200, "body": "10.0.1.10", "faults": []},
    ]
    doc, _ = build(r)
    imds = next(x for x in _p1_lost(doc)["chain"] if x["step"] == "imds")
    assert imds["at"] == "t=+5.50s"
    assert "last read of eni-0aaa's local-ipv4s" in imds["text"]
    assert "5 addresses, missing .15" in imds["text"]
    # The request carried the fault's id: the fault is in the chain.
    assert _steps(_p1_lost(doc)["chain"])[:2] == ["fault", "imds"]


def test_a_build_that_never_read_the_enis_list_is_not_blamed_on_imds():
    """The per-request log covers the decision and holds no read of the ENI's list by the
    node (a build that takes its addresses from EC2 or a cluster store): whatever IMDS was
    serving, no IMDS answer led the build, and the root cause does not say one did."""
    r = story()
    r["imds_requests"] = [
        {"seq": 1, "time": T0 + 0.5, "instance_id": I1, "method": "GET",
         "path": "/latest/meta-data/instance-id", "status": 200, "body": I1, "faults": []},
    ]
    doc, _ = build(r)
    chain = _p1_lost(doc)["chain"]
    assert "imds" not in _steps(chain), chain
    assert all("stale IMDS" not in c["text"] and "compared only lengths" not in c["text"]
               for c in doc["root_cause"]), doc["root_cause"]
    # Without a per-request log (an older report), what IMDS served still stands in.
    assert "imds" in _steps(_p1_lost(build(story())[0])["chain"])


def test_the_reference_daemons_decisions_are_in_the_chain():
    r = story()
    r["nodes"] = NODES
    # The reference daemon stamps its decisions with the monotonic clock (the history's mono:
    # t seconds in this story).
    r["daemon_events"] = {"node-0": [
        {"t": 0.2, "kind": "assign", "eni": ENI, "addresses": ["10.0.1.12"]},
        {"t": 5.8, "kind": "reconcile-del", "eni": ENI, "address": "10.0.1.12",
         "evicted": ["aws-cni/p1/eth0"]},
        {"t": 5.8, "kind": "reconcile-del", "eni": ENI, "address": "10.0.1.14", "evicted": []},
        {"t": 9.0, "kind": "reconcile-add", "eni": ENI, "address": "10.0.1.12"},
        {"t": 9.94, "kind": "release", "eni": ENI, "addresses": ["10.0.1.12"]},
    ]}
    doc, tl = build(r)
    v = _p1_lost(doc)
    daemon = [x for x in v["chain"] if x["step"] == "daemon"]
    assert [x["at"] for x in daemon] == ["t=+5.80s", "t=+9.00s"]
    assert daemon[0]["text"] == ("the daemon on node-0: reconcile dropped .12 .14 from the "
                                 "datastore, evicting p1")
    assert daemon[1]["text"] == "the daemon on node-0: reconcile re-added .12 as free"
    # The IMDS link stands before the decision it explains.
    imds = next(x for x in v["chain"] if x["step"] == "imds")
    assert imds["time"] <= daemon[0]["time"] and "IMDS had served node-0" in imds["text"]
    assert "reconcile dropped .12 .14" in sentence(tl, v)


def test_an_ec2_call_made_by_the_scenario_is_blamed_on_the_scenario():
    r = story()
    r["history"].append("nemesis", "info", "ec2-unassign",
                        {"op": "ec2-unassign", "id": None,
                         "target": {"eni": ENI, "ips": ["10.0.1.12"]}},
                        at=T0 + 9.96, mono=9.96)
    doc, _ = build(r)
    links = _p1_lost(doc)["chain"]
    assert links[0]["step"] == "fault" and "the scenario's ec2-unassign" in links[0]["text"]
    assert "daemon" not in _steps(links)
    assert "the scenario called UnassignPrivateIpAddresses" in links[1]["text"]


def test_the_chain_is_in_report_json_and_report_html(tmp_path):
    paths = write_report(tmp_path, story())
    doc = json.loads(paths["json"].read_text())
    assert all("chain" in v for v in doc["violations"])
    html = paths["html"].read_text()
    assert "Root cause" in html
    assert "lengths equal (1 + 4 = 5), contents differ" in html


def test_an_address_moved_to_another_node_blames_the_taker():
    """EC2 moved p1's address to another node's ENI: the call was that node's daemon's."""
    from cnikit.check.history import History

    r = story()
    h = History()
    for e in r["history"].entries():
        v = e["value"]
        if e["f"] == "ownership" and v["version"] == 3:
            v = {**v, "unset": [], "set": {"10.0.1.12": ["i-0def", "eni-0ccc", False]}}
        h.append(e["process"], e["type"], e["f"], v, at=e["time"], mono=e["mono"])
    r["history"] = h
    r["nodes"] = NODES + [{"index": 1, "name": "node-1", "instance_id": "i-0def",
                           "enis": [{"eni_id": "eni-0ccc", "device_index": 0}]}]
    r["audit"][1] = {"time": T0 + 9.95, "action": "AssignPrivateIpAddresses",
                     "eni_id": "eni-0ccc", "ips": ["10.0.1.12"], "prefixes": [], "outcome": "ok",
                     "instance_id": None}
    doc, _ = build(r)
    v = next(v for v in doc["violations"] if v["kind"] == "ip-not-owned")
    by = {x["step"]: x["text"] for x in v["chain"]}
    assert by["ec2-call"] == ("the daemon on node-1 called AssignPrivateIpAddresses on eni-0ccc "
                              "for .12")
    assert by["ec2"] == "EC2: 10.0.1.12 moved from ENI eni-0aaa to ENI eni-0ccc of node-1"


def test_a_pod_given_an_address_ec2_had_taken_from_its_node():
    """The daemon released .12, another node took it, the daemon re-added it as free (a
    lagging view) and gave it to a new pod: the chain shows the daemon's release (not the
    take, made on the other node's ENI a moment later), where the address went, the re-add
    and the ADD itself."""
    r = story()
    r["nodes"] = NODES
    h = r["history"]
    other_eni, other = "eni-0bbb", "i-0other"
    h.append("nemesis", "info", "ec2-assign-elsewhere",
             {"op": "ec2-assign-elsewhere", "id": None,
              "target": {"eni": other_eni, "ips": ["10.0.1.12"]}}, at=T0 + 10.4, mono=10.4)
    h.append("monitor", "info", "ownership",
             {"version": 4, "full": False, "set": {"10.0.1.12": [other, other_eni, False]},
              "unset": [], "prefixes_set": {}, "prefixes_unset": []}, at=T0 + 10.5, mono=10.5)
    h.append("client", "ok", "pod-add",
             {"pod": "p3", "node": 0, "instance_id": I1, "ip": "10.0.1.12"},
             at=T0 + 13, mono=13)
    r["audit"].append({"time": T0 + 10.4, "action": "AssignPrivateIpAddresses",
                       "eni_id": other_eni, "ips": ["10.0.1.12"], "prefixes": [],
                       "outcome": "ok", "instance_id": other})
    r["daemon_events"] = {"node-0": [
        {"t": 12.0, "kind": "reconcile-add", "eni": ENI, "address": "10.0.1.12"}]}
    doc, _ = build(r)
    v = next(v for v in doc["violations"] if v["kind"] == "ip-not-owned" and v["subject"] == "p3")
    links = v["chain"]
    assert _steps(links) == ["fault", "ec2-call", "ec2", "daemon", "imds", "daemon",
                             "symptom"], links
    call, ec2, readd, imds, add = links[1:6]
    assert call["text"] == ("the daemon on node-0 called UnassignPrivateIpAddresses on "
                            "eni-0aaa for .12")
    assert ec2["text"].startswith("EC2: 10.0.1.12 held by no instance, then by ENI eni-0bbb")
    assert readd["text"] == "the daemon on node-0: reconcile re-added .12 as free"
    assert "still listing .12 that EC2 had taken back" in imds["text"]
    assert add["at"] == "t=+13.00s" and "gave 10.0.1.12 to pod p3 (its CNI ADD)" in add["text"]
    assert "the scenario's" not in " ".join(x["text"] for x in links)


def test_two_pods_on_one_ip_show_what_the_daemon_decided_up_to_the_second_add():
    """After the EC2 change, the daemon's own decisions about the address (here a re-add as
    free) are how a second pod came to get it: they are in the shared-ip chain."""
    r = story()
    r["nodes"] = NODES
    r["history"].append("monitor", "info", "ownership",
                        {"version": 4, "full": False, "set": {"10.0.1.12": [I1, ENI, False]},
                         "unset": [], "prefixes_set": {}, "prefixes_unset": []},
                        at=T0 + 10.5, mono=10.5)
    r["history"].append("client", "ok", "pod-add",
                        {"pod": "p3", "node": 0, "instance_id": I1, "ip": "10.0.1.12"},
                        at=T0 + 11, mono=11)
    r["daemon_events"] = {"node-0": [
        {"t": 10.8, "kind": "reconcile-add", "eni": ENI, "address": "10.0.1.12"}]}
    doc, _ = build(r)
    v = next(v for v in doc["violations"] if v["kind"] == "shared-ip")
    daemon = [x for x in v["chain"] if x["step"] == "daemon"]
    assert [x["text"] for x in daemon] == [
        "the daemon on node-0: reconcile re-added .12 as free"], v["chain"]
    assert daemon[0]["at"] == "t=+10.80s"
    assert _steps(v["chain"])[-1] == "symptom"
