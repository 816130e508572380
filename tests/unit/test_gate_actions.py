"""The gate's registry of modelled actions (cnikit/cloud/gate/actions.py): a group of
actions registers them by being defined, the gate dispatches to it, and an action has one
handler."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import urllib3

from cnikit.cloud import responses as R
from cnikit.cloud.gate import Gate, actions
from cnikit.cloud.gate.actions import ActionGroup, action, handlers
from cnikit.cloud.gate.backend import Backend
from faultcore.registry import DuplicateName

FORM = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}

GATE = Path(actions.__file__).parent


def marked_in_files() -> set[str]:
    """Every `@action("<Action>")` in the gate package's files, read from their source (not
    from the registry), so a group that failed to register is seen missing."""
    out = set()
    for path in GATE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "action" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                out.add(node.args[0].value)
    return out


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for one test: the groups it defines are gone after it."""
    monkeypatch.setattr(actions, "_ACTIONS", actions._ACTIONS.copy())


def test_the_gate_serves_every_action_its_files_mark():
    marked = marked_in_files()
    assert {"AssignPrivateIpAddresses", "DescribeNetworkInterfaces"} <= marked
    assert set(handlers(Backend("http://127.0.0.1:9"))) == marked


def test_a_group_serves_its_actions_once_defined(registry, gate_cloud):
    class AddressesOfTheTest(ActionGroup):
        @action("DescribeAddresses")
        async def _describe(self, r, params, headers):
            return 200, R.action_xml("DescribeAddresses",
                                     f"<addressesSet/><servedBy>{r.name}</servedBy>")

    gate = Gate(gate_cloud.upstream_url).start()
    try:
        resp = urllib3.request("POST", gate.url + "/", headers=FORM,
                               body="Action=DescribeAddresses&Version=2016-11-15")
    finally:
        gate.stop()
    assert resp.status == 200 and b"<servedBy>us-east-1</servedBy>" in resp.data, resp.data
    # A gate made before the group was defined forwards the read to the upstream.
    resp = urllib3.request("POST", gate_cloud.endpoint + "/", headers=FORM,
                           body="Action=DescribeAddresses&Version=2016-11-15")
    assert resp.status == 200 and b"servedBy" not in resp.data


def test_an_action_has_one_handler(registry):
    with pytest.raises(DuplicateName, match=r"modelled EC2 action 'AssignPrivateIpAddresses' is "
                       r"defined twice: in cnikit/cloud/gate/addresses\.py and in "
                       r"tests/unit/test_gate_actions\.py"):
        class AssignAgain(ActionGroup):
            @action("AssignPrivateIpAddresses")
            async def _assign(self, r, params, headers):
                return 200, b""
