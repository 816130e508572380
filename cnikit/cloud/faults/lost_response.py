from __future__ import annotations

from cnikit.cloud.faults.base import Call, Ec2Error, Ec2Fault, Param, choice
from cnikit.cloud.faults.error import MESSAGE, STATUS


class LostResponse(Ec2Fault):
    """The call takes effect in EC2, but its answer is lost: the caller sees `code`
    (InternalError 500 by default) for a change that was made, as after a timeout. Its retry
    then meets the new state (an Unassign of an address no longer on the ENI is refused)."""

    kind = "lost_response"
    stage = "response"
    order = 10
    params = {"code": Param(choice(*STATUS), "InternalError")}
    description = "the call takes effect, then `code` is answered (a lost response)"

    def apply(self, call: Call) -> Ec2Error:
        message = MESSAGE.get(self.code, "The service is unavailable. Retry your request.")
        return Ec2Error(self.code, message, status=STATUS[self.code])
