"""The nemesis's acts on a target's cluster-wide components: by name, through the action
registry as $GATE/nemesis and CniCluster.act take them, one down time from kill to restart.
The components are a stand-in that counts calls (tests/integration/test_cluster_components.py
kills and restarts real ones)."""

from __future__ import annotations

import signal

import pytest

from cnikit.check.history import History
from cnikit.cluster.actions import ACTIONS, act
from cnikit.cluster.nemesis import Nemesis
from faultcore.errors import SpecError


class Components:
    def __init__(self, names):
        self.names, self.calls = names, []

    def _check(self, name):
        if name not in self.names:
            raise ValueError(f"no component {name!r} in this run")

    def signal_component(self, name, sig):
        self._check(name)
        self.calls.append(("kill", name, sig))

    def stop_and_start_component(self, name, wait):
        self._check(name)
        self.calls.append(("restart", name))


@pytest.fixture
def nemesis():
    h = History()
    comps = Components(["operator"])
    return Nemesis(h, daemons=comps), h, comps


def entries(h):
    return [(e["type"], e["f"], e["value"]["target"]) for e in h.entries()
            if e["process"] == "nemesis"]


def test_a_component_is_down_from_its_kill_to_its_restart(nemesis):
    n, h, comps = nemesis
    assert act(n, {"action": "kill-component", "component": "operator"}, 2) == {
        "component": "operator", "signal": "KILL"}
    act(n, {"action": "kill-component", "component": "operator", "signal": "TERM"}, 2)
    assert [v["op"] for v in n.in_effect()] == ["component-kill"]  # one down time
    act(n, {"action": "restart-component", "component": "operator", "wait": 5}, 2)
    assert comps.calls == [("kill", "operator", signal.SIGKILL),
                           ("kill", "operator", signal.SIGTERM), ("restart", "operator")]
    target = {"component": "operator"}
    assert entries(h) == [("start", "component-kill", target), ("end", "component-kill", target)]
    assert n.in_effect() == []


def test_a_restart_of_a_running_component_is_its_own_operation(nemesis):
    n, h, _ = nemesis
    n.restart_component("operator")
    target = {"component": "operator"}
    assert entries(h) == [("start", "component-restart", target),
                          ("end", "component-restart", target)]


def test_an_unknown_component_fails_in_one_line_and_is_recorded(nemesis):
    n, h, comps = nemesis
    with pytest.raises(ValueError, match="no component 'agent'"):
        n.kill_component("agent")
    assert entries(h) == [("fail", "component-kill", {"component": "agent"})]
    assert comps.calls == [] and n.in_effect() == []
    with pytest.raises(SpecError, match="component"):
        act(n, {"action": "kill-component"}, 2)


def test_the_actions_are_registered_and_described():
    described = ACTIONS.describe()
    for name in ("kill-component", "restart-component"):
        assert "component" in described[name]["params"], described[name]
        assert described[name]["chaos"] is False, "not drawn: every seed's schedule stays"


def test_a_component_killed_reaches_the_build_by_itself(nemesis):
    from cnikit.check.exposure import judge

    n, h, _ = nemesis
    n.kill_component("operator")
    seen = judge(h.entries(), [], {})
    assert seen["exposed"] and [f["line"] for f in seen["faults"]] == [
        "the build's component operator was killed"]
