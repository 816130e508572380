from __future__ import annotations

from cnikit.cloud.faults.base import MAX_LAG_S, Chaos, Ec2Fault, Param, number


class DescribeLag(Ec2Fault):
    """DescribeNetworkInterfaces shows the state as it was `seconds` ago (EC2 is eventually
    consistent), at most MAX_LAG_S. The truth (ownership, the rules) never lags."""

    kind = "describe-lag"
    stage = "describe"
    params = {"seconds": Param(number(0, MAX_LAG_S), 5.0, help="how far behind")}
    description = "DescribeNetworkInterfaces shows the state of `seconds` ago"
    chaos = Chaos(rank=4, draw=lambda rng: {"seconds": round(rng.uniform(0.5, 4.0), 2)})

    def age(self) -> float:
        return self.seconds
