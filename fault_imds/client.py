"""Python client for the control API.

    fc = FaultClient(imds.control_url)
    with fc.stale(mac="0a:..", seconds=30):          # removed on exit (if not expired)
        ...
    fid = fc.add("missing", target={"eni_id": "eni-..", "ips": ["10.0.1.7"]}, duration=5)
    fc.list(); fc.remove(fid); fc.clear(); fc.events()
    page = fc.requests(since=0, instance_id="i-..")   # {"requests": [...], "next": seq}

The generic calls (add, list, remove, clear) also drive the EC2 gate's faults, which answer
in the same shape (faultcore/wire.py):

    gate = FaultClient(cloud.endpoint + "/_cnikit")
    with gate.add("throttle", target={"action": "AssignPrivateIpAddresses"}, probability=0.5):
        ...

Shortcuts take the target fields as keywords (instance_id, mac, eni_id, path, ips) and
`seconds` as the fault's duration, except `lag(seconds=N)` where it is the lag itself
(give `duration=` there). A bad spec raises FaultError with the server's one-line reason;
a target EC2 does not have (any more) raises its subclass UnknownTarget.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any

from faultcore.errors import OneLineError

TARGET_FIELDS = ("instance_id", "mac", "eni_id", "path", "ips")


class FaultError(OneLineError):
    """The control API refused a request (the message is its one-line reason)."""


class UnknownTarget(FaultError):
    """The target names an instance or an interface EC2 does not have: `target` is the
    field and value the server named ({"mac": "02:..."}); `departed` is set when EC2 had
    that interface until a moment ago ({"eni_id", "mac", "since": wall clock})."""

    def __init__(self, message: str, target: dict[str, str], departed: dict | None = None):
        super().__init__(message)
        self.target = dict(target)
        self.departed = dict(departed) if isinstance(departed, dict) else None


class FaultHandle(str):
    """A fault's id (usable wherever an id is) that removes the fault as a context manager."""

    client: FaultClient
    fault: dict[str, Any]
    deprecated: str | None  # the API's note when the kind was sent in an old spelling

    def __new__(cls, fid: str, client: FaultClient, fault: dict[str, Any],
                deprecated: str | None = None):
        self = super().__new__(cls, fid)
        self.client = client
        self.fault = fault
        self.deprecated = deprecated
        return self

    @property
    def id(self) -> str:
        return str(self)

    def remove(self) -> bool:
        """Remove the fault; False if it had already expired or been removed."""
        return self.client.remove(self)

    def __enter__(self) -> FaultHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class FaultClient:
    def __init__(self, control_url: str, timeout: float = 10.0):
        self.url = control_url.rstrip("/")
        self.timeout = timeout

    def _call(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read())
                reason = body.get("error") or e.reason
            except (ValueError, AttributeError):
                body, reason = {}, e.reason
            return e.code, {**body, "error": str(reason)}
        except OSError as e:
            raise FaultError(f"fault API at {self.url} unreachable: {e}") from None

    def _ok(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        status, payload = self._call(method, path, body, timeout)
        if status >= 400:
            unknown = payload.get("unknown_target")
            if isinstance(unknown, dict) and unknown:
                raise UnknownTarget(payload["error"], unknown, payload.get("departed"))
            raise FaultError(payload.get("error", f"HTTP {status}"))
        return payload

    # -- generic -----------------------------------------------------------------------------

    def add(
        self,
        kind: str,
        target: dict[str, Any] | None = None,
        duration: float | None = None,
        **attrs,
    ) -> FaultHandle:
        spec: dict[str, Any] = {"kind": kind, **attrs}
        if target:
            spec["target"] = target
        if duration is not None:
            spec["duration"] = duration
        payload = self._ok("POST", "/faults", spec)
        note = payload.get("deprecated")
        if note:
            warnings.warn(note, DeprecationWarning, stacklevel=2)
        return FaultHandle(payload["id"], self, payload.get("fault", {}), note)

    def list(self) -> list[dict[str, Any]]:
        return self._ok("GET", "/faults")["faults"]

    def remove(self, fid: str) -> bool:
        status, payload = self._call("DELETE", f"/faults/{fid}")
        if status == 404:
            return False
        if status >= 400:
            raise FaultError(payload.get("error", f"HTTP {status}"))
        return True

    def clear(self) -> list[str]:
        return self._ok("DELETE", "/faults")["removed"]

    def events(self, since: int = 0, wait: float = 0) -> list[dict[str, Any]]:
        """Events after `since` (a seq); with `wait`, block up to that long for one."""
        path = f"/events?since={int(since)}&wait={float(wait)}"
        return self._ok("GET", path, timeout=self.timeout + wait)["events"]

    def requests(
        self, since: int = 0, instance_id: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """The IMDS requests answered after `since` (a seq), for one instance if given:
        {"requests": [{"seq", "time", "instance_id", "method", "path", "status", "body",
        "faults"}, ...], "next": the seq to pass as `since` next time}."""
        q = {"since": int(since)}
        if instance_id:
            q["instance_id"] = instance_id
        if limit:
            q["limit"] = int(limit)
        return self._ok("GET", "/requests?" + urllib.parse.urlencode(q))

    def kinds(self) -> dict[str, Any]:
        return self._ok("GET", "/kinds")

    def health(self) -> dict[str, Any]:
        return self._ok("GET", "/health")

    # -- shortcuts, one per kind -------------------------------------------------------------

    def _shortcut(self, kind: str, duration, attrs: dict[str, Any], target: dict[str, Any]):
        unknown = set(target) - set(TARGET_FIELDS)
        if unknown:
            raise FaultError(f"unknown target field {sorted(unknown)[0]!r}")
        attrs = {k: v for k, v in attrs.items() if v is not None}
        return self.add(kind, target=target or None, duration=duration, **attrs)

    def stale(self, seconds: float | None = None, **target) -> FaultHandle:
        return self._shortcut("stale", seconds, {}, target)

    def missing(self, seconds: float | None = None, **target) -> FaultHandle:
        return self._shortcut("missing", seconds, {}, target)

    def lag(self, seconds: float, duration: float | None = None, **target) -> FaultHandle:
        return self._shortcut("lag", duration, {"seconds": seconds}, target)

    def error(
        self,
        status: int | None = None,
        probability: float | None = None,
        seconds: float | None = None,
        **target,
    ) -> FaultHandle:
        return self._shortcut(
            "error", seconds, {"status": status, "probability": probability}, target
        )

    def latency(
        self,
        ms: float,
        jitter_ms: float | None = None,
        probability: float | None = None,
        seconds: float | None = None,
        **target,
    ) -> FaultHandle:
        attrs = {"ms": ms, "jitter_ms": jitter_ms, "probability": probability}
        return self._shortcut("latency", seconds, attrs, target)

    def token(
        self,
        mode: str | None = None,
        probability: float | None = None,
        seconds: float | None = None,
        **target,
    ) -> FaultHandle:
        return self._shortcut("token", seconds, {"mode": mode, "probability": probability}, target)

    def drop(
        self, probability: float | None = None, seconds: float | None = None, **target
    ) -> FaultHandle:
        return self._shortcut("drop", seconds, {"probability": probability}, target)
