from __future__ import annotations

from cnikit.cloud.faults.base import MAX_LAG_S, Ec2Fault, Param, number


class DescribeLag(Ec2Fault):
    """DescribeNetworkInterfaces shows the state as it was `seconds` ago (EC2 is eventually
    consistent), at most MAX_LAG_S. The truth (ownership, the rules) never lags."""

    kind = "describe_lag"
    stage = "describe"
    params = {"seconds": Param(number(0, MAX_LAG_S), 5.0)}
    description = "DescribeNetworkInterfaces shows the state of `seconds` ago"

    def age(self) -> float:
        return self.seconds
