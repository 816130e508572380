from __future__ import annotations

from cnikit.cloud.faults.base import Call, Chaos, Ec2Error, Ec2Fault, Param, choice

STATUS = {"InternalError": 500, "Unavailable": 503, "ServiceUnavailable": 503}
MESSAGE = {"InternalError": "An internal error has occurred. Retry your request."}


class Error(Ec2Fault):
    """`InternalError` (500) by default, or `code="Unavailable"` (503)."""

    kind = "error"
    stage = "request"
    order = 20
    params = {"code": Param(choice(*STATUS), "InternalError", help="the EC2 error code")}
    description = "answer `code` (InternalError 500, Unavailable or ServiceUnavailable 503)"
    chaos = Chaos(rank=2, draw=lambda rng: {"probability": round(rng.uniform(0.2, 0.8), 2)})

    def apply(self, call: Call) -> Ec2Error:
        message = MESSAGE.get(self.code, "The service is unavailable. Retry your request.")
        return Ec2Error(self.code, message, status=STATUS[self.code])
