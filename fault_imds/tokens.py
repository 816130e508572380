"""IMDSv2 session tokens: issued by PUT /latest/api/token, bound to the caller's instance."""

from __future__ import annotations

import secrets
import time

MIN_TTL, MAX_TTL = 1, 21600
PURGE_AT = 10_000


class TokenStore:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._tokens: dict[str, tuple[float, str | None]] = {}

    def issue(self, ttl: int, instance_id: str | None) -> str:
        if len(self._tokens) >= PURGE_AT:
            now = self.clock()
            self._tokens = {t: v for t, v in self._tokens.items() if v[0] > now}
        # Real tokens are opaque base64-looking strings of about this length.
        token = secrets.token_urlsafe(42)
        self._tokens[token] = (self.clock() + ttl, instance_id)
        return token

    def holder(self, token: str) -> tuple[bool, str | None]:
        """(live, instance): whether the token was issued and has not expired, and the
        instance it was issued to."""
        entry = self._tokens.get(token)
        if entry is None:
            return False, None
        expires, owner = entry
        if expires <= self.clock():
            del self._tokens[token]
            return False, None
        return True, owner

    def expire(self, token: str) -> None:
        self._tokens.pop(token, None)


def parse_ttl(raw: str | None) -> int | None:
    """The TTL header's value when valid (an integer 1..21600), else None."""
    if raw is None or not raw.strip().isdigit():
        return None
    ttl = int(raw)
    return ttl if MIN_TTL <= ttl <= MAX_TTL else None
