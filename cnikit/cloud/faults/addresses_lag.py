from __future__ import annotations

from cnikit.cloud.faults.base import (
    DESCRIBE,
    KINDS,
    MAX_LAG_S,
    Call,
    Chaos,
    Ec2Fault,
    Param,
    Stage,
    number,
)
from faultcore.errors import SpecError
from faultcore.fault import _checked


class AddressesStage(Stage):
    """Every firing fault hands DescribeNetworkInterfaces an address lag: (seconds, since),
    `since` the monotonic time from which an ENI's attachment makes it lag (None: every
    ENI). The handler lags each ENI's address list by the largest that covers it."""

    def run(self, faults, call: Call) -> None:
        for f in faults:
            call.addresses.append((f.seconds, f.created if f.new_enis else None))


if "addresses" not in KINDS.stages:
    KINDS.add_stage(AddressesStage(
        "addresses", hook=DESCRIBE, order=1,
        description="how far behind DescribeNetworkInterfaces shows ENIs' address lists"))


def _flag(name: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise SpecError(f"{name} must be true or false, got {v!r}")
    return v


class AddressesLag(Ec2Fault):
    """Describe shows an ENI (and its attachment) as it is, but its secondary addresses as
    they were `seconds` ago: an ENI that did not exist then shows its primary address alone
    (upstream #1148, #989: the daemon waited for the attachment only, entered the ENI with no
    addresses, and its next Assign hit PrivateIpAddressLimitExceeded). `new_enis`: only ENIs
    attached since the fault began lag. The truth (ownership, the rules) never lags."""

    kind = "addresses-lag"
    stage = "addresses"
    params = {
        "seconds": Param(number(0, MAX_LAG_S), 5.0, help="how far the address lists lag"),
        "new_enis": Param(_checked(_flag, "true or false", bool), False,
                          help="only ENIs attached since the fault began (else every ENI)"),
    }
    description = ("DescribeNetworkInterfaces shows ENIs' secondary addresses as of `seconds` "
                   "ago (their attachments as they are)")
    chaos = Chaos(rank=5, draw=lambda rng: {"seconds": round(rng.uniform(0.5, 4.0), 2),
                                            "new_enis": rng.random() < 0.5})
