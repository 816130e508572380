"""The checkers as folds over a history (no root needed: histories written by hand)."""

from __future__ import annotations

import json

from cnikit.check.history import History
from cnikit.check.invariants import Invariants, judge


def pods(h: History, *specs: tuple[str, str, str]) -> None:
    for name, instance, ip in specs:
        h.append("client", "ok", "pod-add", {"pod": name, "node": 0, "instance_id": instance,
                                            "ip": ip})


def owners(h: History, full: bool = False, unset=(), **ips) -> None:
    h.info("monitor", "ownership", {"full": full, "set": {ip.replace("_", "."): [i, "eni", False]
                                                          for ip, i in ips.items()},
                                    "unset": list(unset)})


def live() -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=5)
    h.subscribe(inv.step)
    return h, inv


def test_failing_pairs_are_blamed_on_the_pod_they_share():
    h, inv = live()
    pods(h, ("a", "i-1", "10.0.1.5"), ("b", "i-2", "10.0.1.6"), ("c", "i-2", "10.0.1.7"),
         ("d", "i-3", "10.0.1.8"))
    for src, dst in [("b", "a"), ("a", "c"), ("d", "a")]:
        h.info("prober", "fail", {"src": src, "dst": dst, "reason": "timeout"})
    assert inv.failing_pods() == {"a"}
    assert inv.active("unreachable")[0].detail["failing_pairs"] == 3
    for src, dst in [("b", "a"), ("a", "c"), ("d", "a")]:
        h.info("prober", "recover", {"src": src, "dst": dst})
    assert inv.failing_pods() == set() and inv.active() == []
    [v] = inv.violations("unreachable")
    assert v.subject == "a" and v.until is not None and v.until >= v.since


def test_pods_failing_with_the_vpc_anchor_are_blamed_even_when_they_are_the_majority():
    # 3019 on one node: its three pods go dark together; the two pods of the other node are
    # fine. The fewest pods explaining the failing pairs would be the two healthy ones; the
    # anchor (the VPC router, probed by every pod) says which side is lost.
    h, inv = live()
    pods(h, ("a1", "i-1", "10.0.1.5"), ("a2", "i-1", "10.0.1.6"), ("a3", "i-1", "10.0.1.7"),
         ("b1", "i-2", "10.0.1.8"), ("b2", "i-2", "10.0.1.9"))
    for a in ("a1", "a2", "a3"):
        for b in ("b1", "b2"):
            h.info("prober", "fail", {"src": a, "dst": b, "reason": "timeout"})
    assert inv.failing_pods() == {"b1", "b2"}  # mesh evidence alone blames the minority
    for a in ("a1", "a2", "a3"):
        h.info("prober", "fail", {"src": a, "dst": "@vpc", "reason": "timeout"})
    assert inv.failing_pods() == {"a1", "a2", "a3"}
    assert all(not v.subject.startswith("@") for v in inv.violations("unreachable"))


def test_two_pods_with_one_ip_and_wrong_answers_are_a_shared_ip():
    h, inv = live()
    pods(h, ("a", "i-1", "10.0.1.5"), ("b", "i-2", "10.0.1.6"))
    h.info("prober", "wrong", {"src": "b", "dst": "a", "by": "x"})
    [v] = inv.active("shared-ip")
    assert v.subject == "10.0.1.5" and v.detail["answered_by"] == ["x"]
    h.info("prober", "right", {"src": "b", "dst": "a"})
    assert inv.active("shared-ip") == []
    pods(h, ("c", "i-2", "10.0.1.6"))
    [v] = inv.active("shared-ip")
    assert v.subject == "10.0.1.6" and v.detail["pods"] == ["b", "c"]
    h.append("client", "ok", "pod-delete", {"pod": "c"})
    assert inv.active("shared-ip") == [] and len(inv.violations("shared-ip")) == 2


def test_a_pod_ip_must_be_held_by_an_eni_of_its_own_node():
    h, inv = live()
    owners(h, full=True, **{"10_0_1_5": "i-1"})
    pods(h, ("a", "i-1", "10.0.1.5"), ("b", "i-2", "10.0.1.6"))
    [v] = inv.active("ip-not-owned")
    assert v.subject == "b" and v.detail["held_by"] is None
    owners(h, **{"10_0_1_6": "i-2"})
    assert inv.active("ip-not-owned") == []
    owners(h, **{"10_0_1_5": "i-2"})  # moved to the other node
    [v] = inv.active("ip-not-owned")
    assert v.subject == "a" and v.detail["held_by"] == "i-2"
    h.info("monitor", "ownership", {"prefixes_set": {"10.0.1.0/28": ["i-1", "eni"]},
                                    "unset": ["10.0.1.5"]})
    assert inv.active("ip-not-owned") == []  # a /28 prefix on node i-1 holds it


def test_leaks_are_warnings_after_the_grace_period():
    h, inv = live()
    t0 = 1000.0
    h.info("monitor", "ownership", {"full": True, "set": {"10.0.1.9": ["i-1", "eni", False],
                                                          "10.0.1.4": ["i-1", "eni", True]}},
           at=t0)
    h.info("prober", "stats", {"stale": []}, at=t0 + 4)
    assert inv.warnings("leak") == []
    h.info("monitor", "daemon-view", {"instance_id": "i-1", "ips": ["10.0.1.9"]}, at=t0 + 4.5)
    h.info("prober", "stats", {"stale": []}, at=t0 + 9)
    assert inv.warnings("leak") == []  # the daemon knows it: no leak
    h.info("monitor", "daemon-view", {"instance_id": "i-1", "ips": []}, at=t0 + 10)
    h.info("prober", "stats", {"stale": []}, at=t0 + 16)
    [w] = inv.warnings("leak")
    assert w.subject == "10.0.1.9" and w.severity == "warning" and w.since == t0 + 15
    assert inv.ok()  # a warning, not a violation


def test_a_pod_not_probed_for_a_second_is_a_warning():
    h, inv = live()
    pods(h, ("a", "i-1", "10.0.1.5"))
    h.info("prober", "stats", {"stale": ["a"]})
    assert [w.subject for w in inv.warnings("unprobed")] == ["a"] and inv.ok()


def test_history_is_append_only_json_and_judged_the_same_on_replay(tmp_path):
    h, inv = live()
    pods(h, ("a", "i-1", "10.0.1.5"), ("b", "i-2", "10.0.1.5"))
    with h.op("pod-delete", {"pod": "b"}) as op:
        op.result = {"pod": "b"}
    try:
        with h.op("unassign", {"ip": "10.0.1.5"}, process="nemesis"):
            raise RuntimeError("gate said no")
    except RuntimeError:
        pass
    entries = h.entries()
    assert [e["index"] for e in entries] == list(range(len(entries)))
    assert [e["type"] for e in entries[-4:]] == ["invoke", "ok", "invoke", "fail"]
    assert entries[-1]["value"]["error"] == "gate said no"
    h.dump(tmp_path / "history.jsonl")
    loaded = History.load(tmp_path / "history.jsonl")
    assert loaded == json.loads(json.dumps(entries))
    replay = judge(loaded, leak_grace=5)
    assert [(v.kind, v.subject, v.since, v.until) for v in replay.violations()] == \
        [(v.kind, v.subject, v.since, v.until) for v in inv.violations()]
    assert replay.summary()["ok"] is False


def test_the_evidence_names_the_failing_peers_and_the_probers_reason():
    # One path failing between pods that answer everyone else reads differently from a pod
    # gone dark: the line names the peer (here the VPC anchor) and why the probes failed.
    from cnikit.check.checkers.reachability import Reachability

    h, inv = live()
    pods(h, ("a", "i-1", "2400:6500::5"), ("b", "i-2", "2400:6500::6"))
    h.info("prober", "fail", {"src": "a", "dst": "@vpc6", "reason": "send: ENETUNREACH"})
    [v] = inv.active("unreachable")
    what = Reachability.describe(v.to_json(), {"a": {"ip": "2400:6500::5"}})["what"]
    assert what == "no answer from 1 peers: @vpc6; send: ENETUNREACH"
    for dst in ("b", "c", "d"):
        h.info("prober", "fail", {"src": "a", "dst": dst, "reason": "timeout"})
    [v] = inv.active("unreachable")
    what = Reachability.describe(v.to_json(), {})["what"]
    assert what == "no answer from 4 peers: @vpc6, b, c, ...; send: ENETUNREACH, timeout"
