"""The runtime-retry checker over histories written by hand: what the CNI spec requires of a
plugin under the runtime's retries (cnikit.check.checkers.runtime_retries)."""

from __future__ import annotations

from cnikit.check.checkers.runtime_retries import RETRY
from cnikit.check.history import History
from cnikit.check.invariants import Invariants, judge

T0 = 1000.0
PLUGIN_ERROR = "cnikit-cni DEL failed (code 5): DatastoreError: no IP held by x"


def live() -> tuple[History, Invariants]:
    h = History()
    inv = Invariants(leak_grace=5, ip_cooldown=1.5)
    h.subscribe(inv.step)
    h.append("client", "ok", "pod-add", {"pod": "x", "node": 0, "instance_id": "i-1",
                                         "ip": "10.0.1.7"}, at=T0 - 10)
    return h, inv


def retry(h: History, op: str, ok: bool, at: float = T0, **value) -> None:
    v = {"op": op, "pod": "x", "node": 0, "ip": "10.0.1.7", **value}
    h.append("client", "ok" if ok else "fail", RETRY, v, at=at)


def test_a_repeated_add_answering_another_ip_is_a_violation():
    h, inv = live()
    retry(h, "add-repeat", True, answer="10.0.1.8")
    [v] = inv.violations("runtime-retry")
    assert (v.subject, v.since, v.until) == ("x", T0, T0)
    assert (v.detail["ip"], v.detail["answer"]) == ("10.0.1.7", "10.0.1.8")
    assert "answered 10.0.1.8" in v.detail["what"]
    assert [x.subject for x in judge(h.entries()).violations("runtime-retry")] == ["x"]


def test_a_repeated_add_answering_the_same_ip_or_an_error_holds():
    h, inv = live()
    retry(h, "add-repeat", True, answer="10.0.1.7")
    retry(h, "add-repeat", False, error="busy", code=11, status=1)
    assert inv.violations("runtime-retry") == []


def test_a_check_failing_only_after_a_repeated_add_is_a_violation():
    h, inv = live()
    retry(h, "add-repeat", False, error="ptp ADD failed: veth eth0 exists", code=999, status=1)
    retry(h, "check-after-repeat", False, error="prefix-ipam CHECK failed (code 3): no address",
          code=3, status=1, checked_before=True)
    [v] = inv.violations("runtime-retry")
    assert v.detail["op"] == "check-after-repeat" and "passed before" in v.detail["what"]


def test_a_check_that_fails_before_the_repeat_too_or_never_answered_is_not_judged():
    h, inv = live()
    # The build's CHECK fails on an untouched sandbox: no evidence about the repeat.
    retry(h, "check-after-repeat", False, error="CHECK not implemented", code=4, status=1,
          checked_before=False, before="CHECK not implemented")
    # The plugin never answered (timed out, the node gone): the kit's, not the build's.
    retry(h, "check-after-repeat", False, error="timed out", status=None, checked_before=True)
    retry(h, "check-after-repeat", True, checked_before=True)
    assert inv.violations("runtime-retry") == []


def test_a_replayed_del_or_one_without_netns_or_after_a_restart_must_succeed():
    for op in ("del-replayed", "del-empty-netns", "del-after-restart"):
        h, inv = live()
        retry(h, op, False, error=PLUGIN_ERROR, code=5, status=1, held_by=["y"])
        [v] = inv.violations("runtime-retry")
        assert v.detail["op"] == op and "failed" in v.detail["what"], v.detail
        assert op != "del-replayed" or "held by y" in v.detail["what"]


def test_dels_while_the_daemon_is_down_or_given_up_are_not_judged():
    h, inv = live()
    retry(h, "del-daemon-down", False, error="daemon is not running", code=11, status=1)
    retry(h, "del-given-up", False, error="daemon is not running", code=11, status=1)
    assert inv.violations("runtime-retry") == []


def test_a_del_the_plugin_never_answered_is_the_kits_not_the_builds():
    h, inv = live()
    retry(h, "del-replayed", False, error="cnikit-cni DEL timed out after 30s", code=None,
          status=None)
    assert inv.violations("runtime-retry") == []


def test_an_older_historys_failed_repeated_del_is_judged_when_the_plugin_answered_it():
    h, inv = live()
    h.append("client", "fail", "pod-delete-retry", {"pod": "x", "error": PLUGIN_ERROR}, at=T0)
    h.append("client", "fail", "pod-delete-retry",
             {"pod": "z", "error": "the node's network namespace /run/netns/n0 is gone"}, at=T0)
    assert [v.subject for v in inv.violations("runtime-retry")] == ["x"]


def owners(h: History, held: dict[str, str], at: float) -> None:
    """EC2's ownership as the monitor records it: ip -> instance id."""
    h.append("monitor", "info", "ownership",
             {"version": 1, "full": True, "set": {ip: [i, "eni-1", False] for ip, i in held.items()},
              "unset": []}, at=at)


def test_a_pod_whose_del_is_in_flight_is_not_judged_until_that_del_fails():
    """A DEL that succeeds may release the address before the runtime removes the sandbox
    (`pod-deleting`); one that fails keeps the pod (`pod-kept`), judged again from then."""
    h, inv = live()
    owners(h, {"10.0.1.7": "i-1"}, T0 - 5)
    x = {"pod": "x", "ip": "10.0.1.7"}
    h.append("client", "ok", "pod-deleting", x, at=T0)
    owners(h, {}, T0 + 0.1)  # the DEL released it in EC2
    assert inv.violations("ip-not-owned") == []
    h.append("client", "ok", "pod-kept", x, at=T0 + 0.2)  # ... and then answered an error
    [v] = inv.violations("ip-not-owned")
    assert (v.subject, v.since) == ("x", T0 + 0.2)
    h.append("client", "ok", "pod-delete", x, at=T0 + 0.3)
    assert [v.until for v in inv.violations("ip-not-owned")] == [T0 + 0.3]


def test_a_pod_whose_del_succeeded_shares_no_ip_with_the_next_holder():
    h, inv = live()
    h.append("client", "ok", "pod-deleting", {"pod": "x", "ip": "10.0.1.7"}, at=T0)
    h.append("client", "ok", "pod-add", {"pod": "y", "node": 0, "instance_id": "i-1",
                                         "ip": "10.0.1.7"}, at=T0 + 0.1)
    assert inv.violations("shared-ip") == []
