"""Helpers shared by the fault_imds tests (test_imds_*.py)."""

from __future__ import annotations

import http.client
import ipaddress
import urllib.parse
from dataclasses import dataclass

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


@dataclass(frozen=True)
class DualStack:
    """A dual-stack VPC, subnet and instance (see dual_stack)."""

    vpc_id: str
    vpc_block: str  # the VPC's Amazon-provided /56
    subnet_id: str
    subnet_block: str  # a /64 of it
    instance_id: str
    eni_id: str
    mac: str
    ipv6s: tuple[str, ...]  # assigned to the primary ENI, in order

    def address(self, n: int) -> str:
        """The n-th address of the subnet's /64, as IMDS writes it (RFC 5952)."""
        return str(ipaddress.IPv6Network(self.subnet_block)[n])


def dual_stack(ec2, ipv6_count: int = 2, cidr: str = "10.20.0.0/16") -> DualStack:
    """Through `ec2`: a VPC with an Amazon-provided IPv6 /56, a subnet with IPv4 and the
    /56's first /64, one instance in it, and `ipv6_count` explicit IPv6 addresses (::100,
    ::101, ...) on its primary ENI, as the VPC CNI's IPv6 mode finds a node."""
    vpc_id = ec2.create_vpc(CidrBlock=cidr, AmazonProvidedIpv6CidrBlock=True)["Vpc"]["VpcId"]
    vpc = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
    # moto zero-pads the groups ("017c"); EC2, and so IMDS, writes RFC 5952 text.
    vpc_block = str(ipaddress.IPv6Network(vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"]))
    subnet_block = str(next(ipaddress.IPv6Network(vpc_block).subnets(new_prefix=64)))
    v4 = ipaddress.IPv4Network(cidr)
    subnet_id = ec2.create_subnet(
        VpcId=vpc_id, CidrBlock=str(next(v4.subnets(new_prefix=24))), Ipv6CidrBlock=subnet_block,
        AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                             InstanceType="m5.large", SubnetId=subnet_id)["Instances"][0]
    eni = inst["NetworkInterfaces"][0]
    block = ipaddress.IPv6Network(subnet_block)
    ipv6s = tuple(str(block[0x100 + i]) for i in range(ipv6_count))
    if ipv6s:
        ec2.assign_ipv6_addresses(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                  Ipv6Addresses=list(ipv6s))
    return DualStack(vpc_id, vpc_block, subnet_id, subnet_block, inst["InstanceId"],
                     eni["NetworkInterfaceId"], eni["MacAddress"], ipv6s)
