"""The request log: every answered IMDS request, in order, in a bounded ring."""

from __future__ import annotations

from collections import deque
from typing import Any

REQUEST_LOG_MAX = 50_000


class RequestLog:
    """Every answered request, in order, in a bounded ring: what each node asked and got.

    Entries: {"seq", "time" (epoch), "instance_id", "method", "path", "status" (0: the
    connection was dropped), "body" (served text, cut at ~1 KB), "faults" (ids of the active
    faults whose target matches the request)}, plus "observer": true for the kit's own reads.
    """

    def __init__(self, maxlen: int = REQUEST_LOG_MAX):
        self._entries: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self.last_seq = 0

    def add(self, entry: dict[str, Any]) -> None:
        self.last_seq += 1
        entry["seq"] = self.last_seq
        self._entries.append(entry)

    def since(
        self, seq: int = 0, instance_id: str | None = None, limit: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Entries after `seq` (for one instance if given) and the seq to ask from next."""
        out: list[dict[str, Any]] = []
        # Entries are in seq order: skip the old ones from the right end without a scan.
        start = max(0, len(self._entries) - (self.last_seq - seq))
        for i in range(start, len(self._entries)):
            e = self._entries[i]
            if instance_id is not None and e["instance_id"] != instance_id:
                continue
            out.append(e)
            if limit is not None and len(out) >= limit:
                return out, e["seq"]
        return out, self.last_seq
