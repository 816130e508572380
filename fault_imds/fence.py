"""The fence: an IMDS answer waits until the view has read EC2 as of the request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fault_imds.ec2_view import Ec2View

# The longest an answer waits for the view to catch up with EC2: well under the IMDS
# clients' own timeouts (the reference daemon's is 2 s), so a late answer still arrives.
FENCE_S = 1.0


class Fence:
    """Holds an answer until the view has read EC2 as of the request's arrival.

    Only with an EC2 in this process (faultcore.freshness): `counter` is its change count,
    `polled(count)` runs on the loop after each poll. Without a fault the IMDS then never
    answers behind EC2, however busy the machine; staleness is the fault kinds' alone.
    While EC2 cannot be read, or after FENCE_S, the last view is served (counted in `late`).
    """

    def __init__(self, counter: Callable[[], int], view: Ec2View):
        self.counter = counter
        self.view = view
        self.reached = -1
        self.late = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def polled(self, count: int) -> None:
        self.reached = max(self.reached, count)
        keep = []
        for need, fut in self._waiters:
            if fut.done():
                continue
            if need <= self.reached:
                fut.set_result(None)
            else:
                keep.append((need, fut))
        self._waiters = keep

    async def wait(self) -> None:
        need = self.counter()
        if need <= self.reached:
            return
        if self.view.last_error is not None:
            self.late += 1
            return
        self._waiters = [(n, f) for n, f in self._waiters if not f.done()]
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((need, fut))
        self.view.poke()
        try:
            await asyncio.wait_for(fut, FENCE_S)
        except TimeoutError:
            self.late += 1
