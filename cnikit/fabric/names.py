"""Names of everything the fabric creates. Each carries the run id, so cleanup can tell a
dead run's leftovers from a live run's and from things that are not the kit's at all.

    ck-<rid>-vpc            the VPC router namespace
    ck-<rid>-n<i>           node i (one EC2 instance)
    ck-<rid>-n<i>-p<j>      pod j of node i
    <rid>n<i>e<d>           in the vpc namespace: the VPC end of node i's ENI link eth<d>
"""

from __future__ import annotations

import re

from cnikit.runtime import NAME_PREFIX, RUN_ID_LEN

# The fixed addresses inside the VPC (the vpc namespace answers for them).
IMDS_ADDR = "169.254.169.254"
IMDS_PORT = 80
# IMDS's IPv6 endpoint on Nitro instances (served when the instance's IPv6 endpoint is on).
IMDS_ADDR6 = "fd00:ec2::254"
# Not used by AWS; the EC2 gate's address inside the VPC: http://169.254.169.250
GATE_ADDR = "169.254.169.250"
GATE_PORT = 80
# Not used by AWS either; the cluster's object store (cnikit.kube), the run's API server.
STORE_ADDR = "169.254.169.251"
STORE_PORT = 80


def url(addr: str, port: int) -> str:
    """The HTTP endpoint of one of the fixed addresses above."""
    return f"http://{addr}" + ("" if port == 80 else f":{port}")


_NS = re.compile(rf"^{NAME_PREFIX}-([0-9a-zA-Z]{{{RUN_ID_LEN}}})-(.+)$")


def vpc_ns(rid: str) -> str:
    return f"{NAME_PREFIX}-{rid}-vpc"


def node_ns(rid: str, node: int) -> str:
    return f"{NAME_PREFIX}-{rid}-n{node}"


def pod_ns(rid: str, node: int, pod: int) -> str:
    return f"{NAME_PREFIX}-{rid}-n{node}-p{pod}"


def vpc_link(rid: str, node: int, device_index: int) -> str:
    name = f"{rid}n{node}e{device_index}"
    assert len(name) <= 15, name
    return name


def run_id_of(ns_name: str) -> str | None:
    """The run id a kit namespace name carries, or None for names that are not the kit's."""
    m = _NS.match(ns_name)
    return m.group(1) if m else None
