from __future__ import annotations

from cnikit.cloud.errors import subnet_not_found
from cnikit.cloud.faults.base import Call, Ec2Error, Ec2Fault, Param, optional
from cnikit.cloud.query import filters, list_param
from faultcore.errors import SpecError
from faultcore.fault import _checked


def _subnet_id(name: str, v: object) -> str:
    if not isinstance(v, str) or not v.startswith("subnet-") or len(v) > 64:
        raise SpecError(f"{name} must be a subnet id such as subnet-0abc, got {v!r}")
    return v


def asked_subnets(params: dict[str, str] | None) -> list[str]:
    """The subnet ids a DescribeSubnets call names, by id or by its subnet-id filter."""
    params = params or {}
    return list_param(params, "SubnetId") + filters(params).get("subnet-id", [])


class SubnetNotFound(Ec2Fault):
    """DescribeSubnets cannot see a subnet: InvalidSubnetID.NotFound (aws/amazon-vpc-cni-k8s
    #3753: a HyperPod node's ENI sits in a subnet of another account, which the node's
    account cannot describe). With `subnet` set, a call naming only other subnets is
    served; a listing by other filters fails as well, since it would have to show it."""

    kind = "subnet-not-found"
    stage = "request"
    order = 22
    only_actions = ("DescribeSubnets",)
    params = {"subnet": Param(optional(_checked(_subnet_id, "a subnet id", str)), None,
                              help="the subnet DescribeSubnets cannot see (default: the "
                                   "first the call names)")}
    description = ("DescribeSubnets answers InvalidSubnetID.NotFound (`subnet`: the one it "
                   "cannot see)")
    chaos = None  # a scenario's to aim: it says something about the state

    def apply(self, call: Call) -> Ec2Error | None:
        asked = asked_subnets(call.params)
        if self.subnet is not None and asked and self.subnet not in asked:
            return None
        return subnet_not_found(self.subnet or (asked[0] if asked else "subnet-unknown"))
