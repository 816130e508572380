from __future__ import annotations

from fault_imds.faults.base import Answer, ImdsFault, Param, choice


class Token(ImdsFault):
    """Break IMDSv2 sessions. Acts on requests that carry a token.

    mode "reject": the token is answered 401 as if invalid (it stays valid afterwards).
    mode "expire": the token expires right now (401, and for good): the client must PUT
    for a new one, which works unless this fault fires again.
    """

    kind = "token"
    stage = "request"
    order = 20
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {"mode": Param(choice("reject", "expire"), "reject", help="reject or expire")}
    description = "answer 401 to IMDSv2 tokens (`mode` reject, or expire them for good)"

    def applies(self, req) -> bool:
        return req.token is not None

    async def apply(self, req) -> Answer:
        if self.mode == "expire":
            req.expire_token()
        return Answer(401)
