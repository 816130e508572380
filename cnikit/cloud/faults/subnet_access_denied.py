from __future__ import annotations

from cnikit.cloud.faults.base import Call, Ec2Error, Ec2Fault

# EC2's words when the caller's role lacks ec2:DescribeSubnets (upstream broadcasts a
# "MissingIAMPermissions" event on this code: docs/iam-policy.md).
MESSAGE = "You are not authorized to perform this operation."


class SubnetAccessDenied(Ec2Fault):
    """DescribeSubnets is denied: UnauthorizedOperation, HTTP 403, as for a node role without
    ec2:DescribeSubnets. Upstream's subnet discovery then falls back to the node's own
    subnet; v1.22.2 also left the primary IP unrecorded on that path (#3753)."""

    kind = "subnet-access-denied"
    stage = "request"
    order = 23
    only_actions = ("DescribeSubnets",)
    params = {}
    description = "DescribeSubnets answers UnauthorizedOperation (403)"
    chaos = None  # a permission, not weather: a scenario's to aim

    def apply(self, call: Call) -> Ec2Error:
        return Ec2Error("UnauthorizedOperation", MESSAGE, status=403)
