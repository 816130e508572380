"""EC2 faults of issue 30's rows A and H on the gate: `error` answering any code, message
and status (cilium #11088), and `addresses-lag`, Describe showing a new ENI attached before
its secondary addresses (amazon-vpc-cni-k8s #1148, #989)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from cnikit.cloud.faults import FaultSet
from cnikit.errors import UsageError
from tests.waiting import wait_for


def error_of(call) -> tuple[str, str, int]:
    with pytest.raises(ClientError) as exc:
        call()
    r = exc.value.response
    return r["Error"]["Code"], r["Error"]["Message"], r["ResponseMetadata"]["HTTPStatusCode"]


def new_eni(ec2, topo, count: int = 3) -> str:
    return ec2.create_network_interface(SubnetId=topo.subnet_id,
                                        SecondaryPrivateIpAddressCount=count
                                        )["NetworkInterface"]["NetworkInterfaceId"]


def shown(ec2, eni: str) -> tuple[str | None, list[str]]:
    e = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"][0]
    return (e.get("Attachment", {}).get("Status"),
            [a["PrivateIpAddress"] for a in e["PrivateIpAddresses"]])


def test_error_answers_any_code_message_and_status(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = new_eni(ec2, topo)
    # The outage of cilium #11088: Attach answered with an error that names another cause.
    cloud.gate.faults.add("error", target={"action": "AttachNetworkInterface"},
                          code="AttachmentLimitExceeded",
                          message="Interface count 2 exceeds the limit for m5.large")
    attach = lambda: ec2.attach_network_interface(  # noqa: E731
        NetworkInterfaceId=eni, InstanceId=topo.instances[0].instance_id, DeviceIndex=1)
    assert error_of(attach) == ("AttachmentLimitExceeded",
                                "Interface count 2 exceeds the limit for m5.large", 400)
    assert cloud.gate.owners().enis[eni].instance_id is None  # nothing changed
    cloud.gate.faults.clear()
    cloud.gate.faults.add("error", target={"action": "DescribeNetworkInterfaces"},
                          code="UnauthorizedOperation", status=403)
    code, _, status = error_of(lambda: ec2.describe_network_interfaces())
    assert (code, status) == ("UnauthorizedOperation", 403)
    cloud.gate.faults.clear()
    cloud.gate.faults.add("error", target={"action": "DescribeNetworkInterfaces"},
                          code="Unavailable")
    assert error_of(lambda: ec2.describe_network_interfaces())[::2] == ("Unavailable", 503)
    cloud.gate.faults.clear()
    attach()


@pytest.mark.parametrize("attrs, reason", [
    ({"code": "no such code!"}, "code must be an EC2 error code"),
    ({"code": 7}, "code must be an EC2 error code"),
    ({"status": 200}, "status must be an HTTP error status in 400..599"),
    ({"status": "500"}, "status must be an HTTP error status"),
    ({"message": "two\nlines"}, "message must be a one-line text"),
    ({"message": ""}, "message must be a one-line text"),
    ({"colour": "red"}, "unknown field 'colour'"),
])
def test_error_bad_specs_one_line(attrs, reason):
    faults = FaultSet()
    with pytest.raises(UsageError) as exc:
        faults.add("error", **attrs)
    assert reason in str(exc.value) and "\n" not in str(exc.value)
    assert faults.list() == []


def test_addresses_lag_new_eni_attached_before_its_addresses(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    old = new_eni(ec2, topo, 2)
    old_ips = cloud.gate.owners().enis[old].ips
    cloud.gate.faults.add("addresses-lag", seconds=1.0, new_enis=True)
    eni = new_eni(ec2, topo, 3)
    truth = cloud.gate.owners().enis[eni].ips
    assert len(truth) == 4
    ec2.attach_network_interface(NetworkInterfaceId=eni,
                                 InstanceId=topo.instances[0].instance_id, DeviceIndex=1)
    # Attached, and its primary address alone: the secondaries lag (#1148).
    assert shown(ec2, eni) == ("attached", truth[:1])
    assert cloud.gate.owners().enis[eni].ips == truth  # the truth never lags
    # An address filter answers from the same lagging view.
    found = ec2.describe_network_interfaces(
        Filters=[{"Name": "private-ip-address", "Values": [truth[1]]}])["NetworkInterfaces"]
    assert found == []
    # An ENI not attached since the fault began shows its addresses as they are.
    assert sorted(shown(ec2, old)[1]) == sorted(old_ips)
    wait_for(lambda: sorted(shown(ec2, eni)[1]) == sorted(truth), 5)


def test_addresses_lag_every_eni_lags_assigns(gate_fault_vpc):
    cloud, topo = gate_fault_vpc
    ec2 = cloud.client()
    eni = topo.instances[0].primary_eni_id
    before = shown(ec2, eni)
    cloud.gate.faults.add("addresses-lag", seconds=1.0)
    new = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                          SecondaryPrivateIpAddressCount=1)[
        "AssignedPrivateIpAddresses"][0]["PrivateIpAddress"]
    assert shown(ec2, eni) == before  # attachment as it is, the new address not yet
    wait_for(lambda: new in shown(ec2, eni)[1], 5)


def test_addresses_lag_bad_specs_and_kinds():
    faults = FaultSet()
    for attrs in ({"seconds": -1}, {"seconds": 1e6}, {"new_enis": "yes"}):
        with pytest.raises(UsageError):
            faults.add("addresses-lag", **attrs)
    assert faults.list() == []
    fid = faults.add("addresses-lag", seconds=2, new_enis=True)
    call = faults.describe_view()
    assert call.lag == 0.0 and call.addresses == [(2.0, call.addresses[0][1])]
    assert call.addresses[0][1] is not None
    faults.remove(fid)
    assert faults.describe_view().addresses == []


def test_control_api_takes_both_kinds_and_refuses_bad_ones_in_one_line(gate_fault_vpc):
    import json

    import urllib3

    cloud, _ = gate_fault_vpc
    http = urllib3.PoolManager()
    base = cloud.endpoint + "/_cnikit/faults"
    for spec in ({"kind": "error", "code": "IncorrectInstanceState", "status": 400,
                  "message": "Instance 'i-1' is not 'running' or 'stopped'.",
                  "target": {"action": "AttachNetworkInterface"}},
                 {"kind": "addresses-lag", "seconds": 3, "new_enis": True, "duration": 30}):
        r = http.request("POST", base, body=json.dumps(spec))
        assert r.status == 201, r.data
        fault = json.loads(r.data)["fault"]
        assert {k: fault[k] for k in spec if k != "duration"} == {
            k: v for k, v in spec.items() if k != "duration"}
    for bad in ({"kind": "error", "code": "not a code"}, {"kind": "error", "status": 99},
                {"kind": "addresses-lag", "new_enis": 1}, {"kind": "addresses-lag", "seconds": -2}):
        r = http.request("POST", base, body=json.dumps(bad))
        reason = json.loads(r.data)["error"]
        assert r.status == 400 and reason and "\n" not in reason
    kinds = json.loads(http.request("GET", cloud.endpoint + "/_cnikit/kinds").data)
    assert "addresses-lag" in json.dumps(kinds) and "message" in json.dumps(kinds)
    assert len(json.loads(http.request("GET", base).data)["faults"]) == 2
