from __future__ import annotations

from cnikit.cloud.faults.base import Call, Chaos, Ec2Fault, Param, number

# An attach or detach longer than this is an outage, not a slow transition.
MAX_TRANSITION_S = 120.0


class SlowAttachment(Ec2Fault):
    """Attach and detach take time, as on real EC2 (upstream #732, #401, #608, #1223): an
    AttachNetworkInterface leaves the ENI "attaching" for `attach_s` seconds, then
    "attached"; a DetachNetworkInterface leaves it "detaching" for `detach_s`, then
    "available". Meanwhile Describe shows that status, the IMDS lists a detaching ENI but not
    an attaching one, and DeleteNetworkInterface answers InvalidParameterValue "... is
    currently in use." (cnikit.cloud.gate.transition_stage). Its target's `action` narrows it
    to one of the two."""

    kind = "slow-attachment"
    stage = "transition"
    params = {
        "attach_s": Param(number(0, MAX_TRANSITION_S), 2.0,
                          help="seconds an ENI stays attaching after AttachNetworkInterface"),
        "detach_s": Param(number(0, MAX_TRANSITION_S), 5.0,
                          help="seconds an ENI stays detaching after DetachNetworkInterface"),
    }
    description = "Attach/Detach leave the ENI attaching/detaching for attach_s/detach_s"
    chaos = Chaos(rank=5, draw=lambda rng: {"attach_s": round(rng.uniform(0.5, 3.0), 2),
                                            "detach_s": round(rng.uniform(1.0, 8.0), 2)})

    def settle_s(self, call: Call) -> float:
        if call.action == "AttachNetworkInterface":
            return self.attach_s
        if call.action == "DetachNetworkInterface":
            return self.detach_s
        return 0.0
