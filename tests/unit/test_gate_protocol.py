"""Bad input on the EC2 wire: refused like EC2 refuses it, in EC2's XML error format.

Raw HTTP (urllib3), because boto3 would refuse to send most of these.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import urllib3

FORM = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager()


def ec2_error(resp) -> str:
    """The EC2 error code of an error document; fails on anything else (HTML, traceback)."""
    root = ET.fromstring(resp.data)
    assert root.tag.endswith("Response"), resp.data[:200]
    code = root.findtext("Errors/Error/Code")
    assert code and root.findtext("Errors/Error/Message") and root.findtext("RequestID")
    return code


@pytest.mark.parametrize("body,code", [
    ("Version=2016-11-15", "MissingAction"),
    ("Action=Bogus&Version=2016-11-15", "InvalidAction"),
    ("Action=AssignPrivateIpAddresses&Version=2016-11-15", "MissingParameter"),
    ("Action=AssignPrivateIpAddresses&NetworkInterfaceId=eni-12345678", "InvalidNetworkInterfaceID.NotFound"),
    ("Action=DeleteNetworkInterface&NetworkInterfaceId=eni-00000000", "InvalidNetworkInterfaceID.NotFound"),
    ("Action=AttachNetworkInterface&NetworkInterfaceId=eni-1&InstanceId=i-1", "MissingParameter"),
    ("Action=DescribeNetworkInterfaces&MaxResults=2", "InvalidParameterValue"),
    ("Action=DescribeNetworkInterfaces&Filter.1.Name=bogus&Filter.1.Value.1=x", "InvalidParameterValue"),
    ("Action=DetachNetworkInterface&AttachmentId=eni-attach-404", "InvalidAttachmentID.NotFound"),
])
def test_bad_requests_answer_ec2_errors(gate_cloud, http, body, code):
    resp = http.request("POST", gate_cloud.endpoint + "/", body=body, headers=FORM)
    assert resp.status == 400
    assert ec2_error(resp) == code


def test_bad_numbers_and_bytes_are_400_not_500(gate_cloud, gate_new_vpc, http):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    eni = topo.instances[0].primary_eni_id
    for body in [
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={eni}&SecondaryPrivateIpAddressCount=abc",
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={eni}&PrivateIpAddress.1=not-an-ip",
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={eni}&Ipv4Prefix.1=nonsense",
        f"Action=AssignPrivateIpAddresses&NetworkInterfaceId={eni}",
        f"Action=UnassignPrivateIpAddresses&NetworkInterfaceId={eni}&PrivateIpAddress.1={topo.instances[0].primary_ip}",
    ]:
        resp = http.request("POST", gate_cloud.endpoint + "/", body=body, headers=FORM)
        assert resp.status == 400, (body, resp.data)
        ec2_error(resp)
    resp = http.request("POST", gate_cloud.endpoint + "/", body=b"Action=\xff\xfe", headers=FORM)
    assert resp.status == 400 and ec2_error(resp) == "MalformedQueryString"
    assert gate_cloud.gate.owners().enis[eni].ips == [topo.instances[0].primary_ip]


def test_upstream_crash_becomes_internal_error_xml(gate_cloud, http):
    # moto answers an HTML 500 page for filters it has not implemented.
    body = "Action=DescribeVpcs&Filter.1.Name=no-such-filter&Filter.1.Value.1=x"
    resp = http.request("POST", gate_cloud.endpoint + "/", body=body, headers=FORM)
    assert resp.status in (400, 500)
    ec2_error(resp)


def test_get_query_string_works_like_post(gate_cloud, http):
    resp = http.request("GET", gate_cloud.endpoint + "/?Action=DescribeNetworkInterfaces&Version=2016-11-15")
    assert resp.status == 200 and b"networkInterfaceSet" in resp.data


def test_unmodelled_mutations_are_forwarded_and_resynced(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=1)
    ec2 = gate_cloud.client()
    eni = topo.instances[0].primary_eni_id
    ec2.create_tags(Resources=[eni], Tags=[{"Key": "cnikit", "Value": "yes"}])
    found = ec2.describe_network_interfaces(
        Filters=[{"Name": "tag:cnikit", "Values": ["yes"]}])["NetworkInterfaces"]
    assert [e["NetworkInterfaceId"] for e in found] == [eni]
    assert any(r.action == "CreateTags" for r in gate_cloud.gate.audit.records())


def test_describe_pagination(gate_cloud, gate_new_vpc):
    topo = gate_new_vpc(gate_cloud, nodes=0)
    ec2 = gate_cloud.client()
    made = {ec2.create_network_interface(SubnetId=topo.subnet_id)["NetworkInterface"]["NetworkInterfaceId"]
            for _ in range(7)}
    seen = []
    kw = {"Filters": [{"Name": "subnet-id", "Values": [topo.subnet_id]}], "MaxResults": 5}
    for _ in range(5):
        page = ec2.describe_network_interfaces(**kw)
        seen += [e["NetworkInterfaceId"] for e in page["NetworkInterfaces"]]
        if "NextToken" not in page:
            break
        kw["NextToken"] = page["NextToken"]
    assert sorted(seen) == sorted(made)


def test_upstream_gone_answers_unavailable(http):
    from cnikit.cloud import Cloud

    cloud = Cloud.start(ec2="moto")
    try:
        cloud._owned.stop()  # the upstream dies under the gate
        # moto still serves a connection accepted before it stopped (the gate's spare one)
        for _ in range(3):
            resp = http.request("POST", cloud.endpoint + "/", headers=FORM,
                                body="Action=DescribeVpcs&Version=2016-11-15")
            if resp.status != 200:
                break
        assert resp.status == 503 and ec2_error(resp) == "Unavailable"
        resp = http.request("GET", cloud.endpoint + "/_cnikit/owners")
        assert resp.status == 200  # ownership never needs the upstream
    finally:
        cloud.gate.stop()
