"""The gate's registry of modelled actions (cnikit/cloud/gate/actions.py): a group of
actions registers them by being defined, the gate dispatches to it, and an action has one
handler."""

from __future__ import annotations

import pytest
import urllib3

from cnikit.cloud import responses as R
from cnikit.cloud.gate import Gate, actions
from cnikit.cloud.gate.actions import Actions, action, handlers
from cnikit.cloud.gate.backend import Backend

FORM = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}

MODELLED = {
    "RunInstances", "TerminateInstances",
    "CreateNetworkInterface", "DeleteNetworkInterface", "AttachNetworkInterface",
    "DetachNetworkInterface", "DescribeNetworkInterfaces",
    "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses",
    "AssignIpv6Addresses", "UnassignIpv6Addresses",
    "DescribeSubnets", "CreateSubnet", "CreateVpc", "DescribeVpcs",
}


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for one test: the groups it defines are gone after it."""
    monkeypatch.setattr(actions, "_ACTIONS", dict(actions._ACTIONS))


def test_the_gate_models_its_actions():
    assert set(handlers(Backend("http://127.0.0.1:9"))) == MODELLED


def test_a_group_serves_its_actions_once_defined(registry, gate_cloud):
    class AddressesOfTheTest(Actions):
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
    with pytest.raises(TypeError, match="AssignPrivateIpAddresses has two handlers"):
        class AssignAgain(Actions):
            @action("AssignPrivateIpAddresses")
            async def _assign(self, r, params, headers):
                return 200, b""
