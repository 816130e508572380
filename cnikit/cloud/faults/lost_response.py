from __future__ import annotations

from cnikit.cloud.faults.error import Error


class LostResponse(Error):
    """The call takes effect in EC2, but its answer is lost: the caller sees `code`
    (InternalError 500 by default) for a change that was made, as after a timeout. Its retry
    then meets the new state (an Unassign of an address no longer on the ENI is refused)."""

    kind = "lost-response"
    stage = "response"
    order = 10
    description = "the call takes effect, then `code` is answered (a lost response)"
    chaos = None  # random chaos does not draw it (Error's draw is not inherited)
