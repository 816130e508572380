"""Helpers shared by the fault_imds tests (test_imds_*.py)."""

from __future__ import annotations

import http.client
import urllib.parse

from fault_imds.handler import INSTANCE_HEADER, TOKEN_HEADER, TTL_HEADER

MACS = "/latest/meta-data/network/interfaces/macs/"




class Imds:
    """A tiny raw HTTP client for one IMDS, as a given instance (loopback header)."""

    def __init__(self, url: str, instance_id: str | None = None):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.instance_id = instance_id

    def request(self, method: str, path: str, headers: dict | None = None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        h = dict(headers or {})
        if self.instance_id:
            h.setdefault(INSTANCE_HEADER, self.instance_id)
        try:
            conn.request(method, path, headers=h)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(), resp.getheader("Content-Type")
        finally:
            conn.close()

    def get(self, path: str, token: str | None = None):
        return self.request("GET", path, {TOKEN_HEADER: token} if token else None)

    def text(self, path: str, token: str | None = None) -> str | None:
        status, body, _ = self.get(path, token)
        return body if status == 200 else None

    def lines(self, path: str, token: str | None = None) -> list[str] | None:
        body = self.text(path, token)
        return body.split("\n") if body is not None else None

    def token(self, ttl: int = 21600) -> str:
        status, body, _ = self.request("PUT", "/latest/api/token", {TTL_HEADER: str(ttl)})
        assert status == 200, (status, body)
        return body

    def ips(self, mac: str) -> list[str] | None:
        return self.lines(f"{MACS}{mac}/local-ipv4s")


def eni_ips(ec2, eni_id: str) -> list[str]:
    eni = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])["NetworkInterfaces"][0]
    primary = [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"] if a.get("Primary")]
    return primary + [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"] if not a.get("Primary")]


def give_instance_profile(cloud, instance_id: str, name: str = "node-role") -> str:
    """Create an IAM instance profile (role and profile both `name`) in the moto behind the
    cloud and associate it with the instance, as EC2 would; returns the profile's ARN."""
    import boto3

    iam = boto3.client("iam", endpoint_url=cloud.upstream_url, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    arn = iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    cloud.client().associate_iam_instance_profile(IamInstanceProfile={"Arn": arn},
                                                  InstanceId=instance_id)
    return arn
