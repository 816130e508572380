"""Attach and detach that take time (the EC2 fault kind `slow-attachment`, on the fault
stage `transition`): the gate side.

The upstream (moto, LocalStack) attaches and detaches at once. When the transition hook
point gives a call `settle` seconds, the gate's mirror shows the ENI's attachment
"attaching" or "detaching" meanwhile (`Mirror.set_attachment_status`; the IMDS, which
derives from Describe, lists a detaching ENI and not yet an attaching one) and completes it
on a timer on the gate's loop (`Mirror.settle_attachment`). While it is pending, Delete is
refused as "currently in use" (`Mirror.plan_delete`) and a second Detach is answered as
done. Timers still pending when the gate shuts down are cancelled.
"""

from __future__ import annotations

import asyncio

from cnikit.cloud.records import Attachment


class Transitions:
    """The pending timers of one gate (used on its loop only)."""

    def __init__(self, backend):
        self.backend = backend
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def begin(self, r, eni_id: str, attachment: Attachment, status: str, seconds: float) -> None:
        """Show `attachment` as `status` for `seconds`, then complete it."""
        key = (r.name, eni_id)
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self.backend.mutate(r, r.mirror.set_attachment_status, eni_id, attachment, status)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(seconds, self._settle, r, eni_id,
                                            attachment.attachment_id)

    def _settle(self, r, eni_id: str, attachment_id: str) -> None:
        self._timers.pop((r.name, eni_id), None)
        if self.backend.closing:
            return
        if r.mirror.pending.get(eni_id) is not None:
            self.backend.mutate(r, r.mirror.settle_attachment, eni_id, attachment_id)

    def cancel_all(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def pending(self) -> int:
        return len(self._timers)
