"""Cloud: an upstream EC2 (embedded moto, or an external LocalStack) with the gate in front.

The upstream for `ec2="localstack"` is an explicit endpoint, else where localstack-client
says LocalStack is (`AWS_ENDPOINT_URL`, else `LOCALSTACK_HOST`, default localhost:4566).
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import boto3
import botocore.config

from cnikit.cloud import localstack
from cnikit.cloud.gate import Gate, check_region
from cnikit.cloud.limits import node_types
from cnikit.cloud.localstack import LocalStackProcess, localstack_python
from cnikit.cloud.moto_server import MotoServer, wait_http
from cnikit.errors import UsageError

DEFAULT_REGION = "us-east-1"
# Dummy credentials: an AWS SDK or the AWS CLI refuses to call without some, and neither
# moto, LocalStack nor the gate checks them.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
# The tag VPC CNI's enhanced subnet discovery reads (EKS documents it): a subnet tagged "1"
# may hold the ENIs of pods from nodes in other subnets of its AZ, one tagged "0" is left out.
SUBNET_DISCOVERY_TAG = "kubernetes.io/role/cni"
# moto's and LocalStack's stock Amazon Linux image (any registered AMI id works).
DEFAULT_AMI = "ami-12c6146b"


@dataclass(frozen=True)
class Instance:
    """A node's instance as the kit launched it (the daemon reads its own view of one)."""

    instance_id: str
    instance_type: str
    primary_eni_id: str
    primary_ip: str
    mac: str
    az: str
    subnet_id: str
    primary_ipv6: str | None = None  # the primary ENI's IPv6 address, in a dual-stack subnet


@dataclass(frozen=True)
class Topology:
    vpc_id: str
    vpc_cidr: str
    subnet_id: str
    subnet_cidr: str
    az: str
    instances: list[Instance] = field(default_factory=list)
    vpc_ipv6_cidr: str | None = None  # the VPC's /56 (dual stack)
    subnet_ipv6_cidr: str | None = None  # the subnet's /64 of it
    # Other subnets of the VPC in the nodes' AZ (Cloud.add_subnet): id -> CIDR.
    other_subnets: dict[str, str] = field(default_factory=dict)


def _subnet_tags(tags: dict[str, str] | None) -> dict:
    """CreateSubnet's TagSpecifications for `tags` (none: no argument)."""
    if not tags:
        return {}
    return {"TagSpecifications": [{"ResourceType": "subnet", "Tags": [
        {"Key": k, "Value": v} for k, v in tags.items()]}]}


def _reach(upstream: str, probe: str, deadline_s: float) -> None:
    try:
        wait_http(probe, deadline_s=deadline_s)
    except TimeoutError as e:
        raise UsageError(f"the EC2 upstream does not answer at {upstream}: {e}") from None


class Cloud:
    def __init__(self, gate: Gate, upstream_url: str, owned, region: str):
        self.gate = gate
        self.upstream_url = upstream_url
        self.region = region
        self._owned = owned  # the upstream server this Cloud started (stopped with it)
        # One client per endpoint and region, shared (botocore's clients are thread-safe):
        # making one costs 7-200 ms of CPU, and the nemesis used to make one per fault.
        self._clients: dict[tuple[str, str], object] = {}
        self._clients_lock = threading.Lock()

    @classmethod
    def start(cls, ec2: str = "moto", endpoint: str | None = None, port: int = 0,
              host: str = "127.0.0.1", region: str = DEFAULT_REGION,
              seed: int | None = None) -> Cloud:
        """Start or reach the upstream, then the gate on host:port.

        moto: embedded (a thread of this process) unless `endpoint` names a running one.
        localstack: `endpoint`, else localstack-client's default; when nothing answers there
        and `make localstack` was run, a LocalStack of our own on a free loopback port.
        `region` is the kit's own (unsigned calls, `client()`, `bootstrap()`); the gate
        serves every region a request is signed for.
        """
        check_region(region)
        owned = None
        if ec2 == "moto":
            if endpoint:
                upstream = endpoint
                _reach(upstream, upstream, 10)
            else:
                owned = MotoServer().start()
                upstream = owned.url
        elif ec2 == "localstack":
            upstream = endpoint or localstack.endpoint()
            try:
                _reach(upstream, upstream + "/_localstack/health", 10 if endpoint else 2)
            except UsageError as e:
                if endpoint:
                    raise
                if localstack_python() is None:
                    raise UsageError(f"no LocalStack answers at {upstream} and none is "
                                     "installed for the kit to start: run `make localstack` "
                                     "(or give a running one's URL with --ec2-endpoint)") from e
                owned = LocalStackProcess().start()
                upstream = owned.url
        else:
            raise UsageError(f"unknown EC2 upstream {ec2!r} (use moto or localstack)")
        try:
            gate = Gate(upstream, region=region, host=host, port=port, seed=seed).start()
        except BaseException:
            if owned is not None:
                owned.stop()
            raise
        return cls(gate, upstream, owned, region)

    @property
    def endpoint(self) -> str:
        return self.gate.url

    def client_env(self, endpoint: str | None = None) -> dict[str, str]:
        """The environment an AWS SDK or the AWS CLI needs to call this EC2 (at `endpoint`,
        default the gate): its endpoint, the kit's region (where its VPCs are; a client
        signing for another region sees an empty EC2) under both names SDKs read, and
        dummy credentials."""
        return {"AWS_ENDPOINT_URL_EC2": (endpoint or self.endpoint).rstrip("/"),
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region, **CREDENTIALS}

    def client(self, endpoint: str | None = None, region: str | None = None):
        """A boto3 EC2 client on the gate (or on `endpoint`) signing for `region` (default:
        the kit's own), dummy credentials, one retry (botocore's `max_attempts` counts
        retries, not attempts). The same client for the same endpoint and region."""
        key = (endpoint or self.endpoint, region or self.region)
        with self._clients_lock:  # boto3's default session is not thread-safe
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = boto3.client(
                    "ec2",
                    endpoint_url=key[0],
                    region_name=key[1],
                    aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                    config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                                  connect_timeout=5, read_timeout=60),
                )
        return client

    def bootstrap(self, nodes: int = 3, instance_type: str = "m5.large",
                  vpc_cidr: str = "10.0.0.0/16", subnet_cidr: str = "10.0.1.0/24",
                  az: str | None = None, ipv6: bool = False,
                  subnet_tags: dict[str, str] | None = None,
                  instance_types: Sequence[str] | None = None) -> Topology:
        """A VPC, one subnet and `nodes` running instances, all through the gate.

        `instance_types`: one type per node, in node order (a run mixing types); without
        it every node is an `instance_type`.

        `subnet_tags`: the subnet's tags, as EKS's subnet discovery reads them
        (`kubernetes.io/role/cni` "1" or "0": SUBNET_DISCOVERY_TAG).

        `ipv6`: dual stack, as an EKS IPv6 cluster's VPC: an Amazon-provided /56 on the
        VPC, the subnet's first /64 of it with AssignIpv6AddressOnCreation, so each
        instance's primary ENI has an IPv6 address besides its IPv4 one."""
        ec2 = self.client()
        az = az or f"{self.region}a"
        vpc = ec2.create_vpc(CidrBlock=vpc_cidr, AmazonProvidedIpv6CidrBlock=ipv6)["Vpc"]
        vpc_id = vpc["VpcId"]
        vpc_v6 = subnet_v6 = None
        extra = {}
        if ipv6:
            # moto writes the /56 with zero-padded groups: the RFC 5952 text, as EC2 gives it
            vpc_v6 = str(ipaddress.IPv6Network(
                vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"]))
            subnet_v6 = str(next(ipaddress.IPv6Network(vpc_v6).subnets(new_prefix=64)))
            extra["Ipv6CidrBlock"] = subnet_v6
        extra.update(_subnet_tags(subnet_tags))
        subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock=subnet_cidr,
                                      AvailabilityZone=az, **extra)["Subnet"]["SubnetId"]
        if ipv6:
            ec2.modify_subnet_attribute(SubnetId=subnet_id,
                                        AssignIpv6AddressOnCreation={"Value": True})
        instances = []
        types = node_types(instance_type, instance_types, nodes)
        # One RunInstances per run of nodes of one type, in node order, so node i is the
        # i-th instance launched (a single-type cluster is one call, as before).
        for itype, group in itertools.groupby(types):
            count = len(list(group))
            res = ec2.run_instances(ImageId=DEFAULT_AMI, MinCount=count, MaxCount=count,
                                    InstanceType=itype, SubnetId=subnet_id)
            for inst in res["Instances"]:
                iid = inst["InstanceId"]
                eni = ec2.describe_network_interfaces(Filters=[
                    {"Name": "attachment.instance-id", "Values": [iid]},
                    {"Name": "attachment.device-index", "Values": ["0"]},
                ])["NetworkInterfaces"][0]
                v6 = [a["Ipv6Address"] for a in eni.get("Ipv6Addresses", ())]
                instances.append(Instance(iid, itype, eni["NetworkInterfaceId"],
                                          eni["PrivateIpAddress"], eni["MacAddress"], az,
                                          subnet_id, v6[0] if v6 else None))
        return Topology(vpc_id, vpc_cidr, subnet_id, subnet_cidr, az, instances, vpc_v6,
                        subnet_v6)

    def add_subnet(self, topo: Topology, cidr: str, tags: dict[str, str] | None = None) -> str:
        """Another subnet of the topology's VPC in its nodes' AZ, with `tags` (as bootstrap's
        `subnet_tags`): where subnet discovery may put a node's new ENIs."""
        subnet_id = self.client().create_subnet(
            VpcId=topo.vpc_id, CidrBlock=cidr, AvailabilityZone=topo.az,
            **_subnet_tags(tags))["Subnet"]["SubnetId"]
        topo.other_subnets[subnet_id] = cidr
        return subnet_id

    def stop(self) -> None:
        self.gate.stop()
        if self._owned is not None:
            self._owned.stop()
            self._owned = None

    def __enter__(self) -> Cloud:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
