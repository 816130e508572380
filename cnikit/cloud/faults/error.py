from __future__ import annotations

import re

from cnikit.cloud.faults.base import Call, Chaos, Ec2Error, Ec2Fault, Param, optional
from faultcore.errors import SpecError
from faultcore.fault import _checked

# The codes EC2 answers with a 5xx; any other code is a client error (400) unless `status`
# says otherwise.
STATUS = {"InternalError": 500, "InternalFailure": 500, "Unavailable": 503,
          "ServiceUnavailable": 503}
MESSAGE = {"InternalError": "An internal error has occurred. Retry your request.",
           "InternalFailure": "An internal error has occurred. Retry your request."}
# What random chaos answers with: codes EC2 gives for any action, which say nothing about
# the state (an outage, a permission that has not propagated). A code that does, such as
# InvalidNetworkInterfaceID.NotFound for an ENI that exists, is a scenario's to aim
# (attach-misleading-error), not a draw on every call.
DRAWN = ("InternalError", "Unavailable", "UnauthorizedOperation")
# An EC2 error code: words and dots (InvalidNetworkInterfaceID.NotFound, Client.X).
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z0-9]+)*")


def _code(name: str, v: object) -> str:
    if not isinstance(v, str) or len(v) > 100 or not _CODE.fullmatch(v):
        raise SpecError(f"{name} must be an EC2 error code such as InternalError or "
                        f"AttachmentLimitExceeded, got {v!r}")
    return v


def _message(name: str, v: object) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > 1000 or "\n" in v:
        raise SpecError(f"{name} must be a one-line text of at most 1000 characters, "
                        f"got {v!r:.80}")
    return v


def _status(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 400 <= v <= 599:
        raise SpecError(f"{name} must be an HTTP error status in 400..599, got {v!r}")
    return v


class Error(Ec2Fault):
    """Answer any EC2 error instead of serving the call (cilium #11088: an outage answered
    Attach with a misleading error): `code` (default InternalError), `message` (default: a
    generic one for the code) and `status` (default 500/503 for EC2's server-side codes,
    400 for the rest)."""

    kind = "error"
    stage = "request"
    order = 20
    params = {
        "code": Param(_checked(_code, "an EC2 error code", str), "InternalError",
                      help="the EC2 error code (any: InternalError, Unavailable, "
                           "AttachmentLimitExceeded, UnauthorizedOperation, ...)"),
        "message": Param(optional(_checked(_message, "one line of text", str)), None,
                         help="the error's message (default: a generic one for the code)"),
        "status": Param(optional(_checked(_status, "an HTTP status in 400..599", int)), None,
                        help="the HTTP status (default: 500/503 for EC2's server errors, "
                             "else 400)"),
    }
    description = "answer any EC2 error: `code`, `message`, `status` (default InternalError 500)"
    chaos = Chaos(rank=2, draw=lambda rng: {"probability": round(rng.uniform(0.2, 0.8), 2),
                                            "code": rng.choice(DRAWN)})

    def apply(self, call: Call) -> Ec2Error:
        status = self.status if self.status is not None else STATUS.get(self.code, 400)
        message = self.message
        if message is None:
            message = MESSAGE.get(self.code) or (
                "The service is unavailable. Retry your request." if status >= 500
                else f"{self.code} (injected by the kit's EC2 fault)")
        return Ec2Error(self.code, message, status=status)
