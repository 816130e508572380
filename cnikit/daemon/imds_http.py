"""The real IMDS view: IMDSv2 (token) over HTTP, like upstream's ec2metadata wrapper."""

from __future__ import annotations

import http.client
import time
import urllib.parse

from cnikit.daemon.apis import ApiError, EniView, Identity

TOKEN_TTL = 21600


class _NotFound(Exception):
    pass


class HttpImds:
    def __init__(self, endpoint: str, instance_id_header: str | None = None, timeout: float = 2.0):
        u = urllib.parse.urlsplit(endpoint)
        self._host, self._port = u.hostname, u.port or 80
        self._headers = {"X-Cnikit-Instance-Id": instance_id_header} if instance_id_header else {}
        self._timeout = timeout
        self._token: str | None = None
        self._token_until = 0.0

    def _request(self, method: str, path: str, headers: dict) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request(method, path, headers={**self._headers, **headers})
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        except (OSError, http.client.HTTPException) as e:
            raise ApiError(f"IMDS {path}: {e}", "IMDSUnreachable") from None
        finally:
            conn.close()

    def _get_token(self) -> str | None:
        if self._token and time.monotonic() < self._token_until:
            return self._token
        status, body = self._request("PUT", "/latest/api/token",
                                     {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL)})
        if status in (403, 404, 405):
            return None  # like the AWS SDKs: an IMDS without v2 tokens is read with IMDSv1
        if status != 200:
            raise ApiError(f"IMDS token: HTTP {status}", f"HTTP{status}")
        self._token, self._token_until = body.strip(), time.monotonic() + TOKEN_TTL / 2
        return self._token

    def get(self, path: str) -> str:
        for attempt in range(2):
            token = self._get_token()
            headers = {"X-aws-ec2-metadata-token": token} if token else {}
            status, body = self._request("GET", f"/latest/meta-data/{path}", headers)
            if status == 200:
                return body
            if status == 401 and attempt == 0:
                self._token = None  # expired or revoked: one fresh token, then give up
                continue
            if status == 404:
                raise _NotFound(path)
            raise ApiError(f"IMDS {path}: HTTP {status}", f"HTTP{status}")
        raise ApiError(f"IMDS {path}: token rejected", "HTTP401")

    def _lines(self, path: str, missing_ok: bool = False) -> list[str]:
        try:
            return [x.strip() for x in self.get(path).splitlines() if x.strip()]
        except _NotFound:
            if missing_ok:
                return []
            raise ApiError(f"IMDS {path}: 404", "HTTP404") from None

    def identity(self) -> Identity:
        def one(p):
            lines = self._lines(p)
            return lines[0] if lines else ""

        return Identity(instance_id=one("instance-id"), instance_type=one("instance-type"),
                        primary_mac=one("mac"), az=self._opt("placement/availability-zone"))

    def _opt(self, path: str) -> str:
        try:
            lines = self._lines(path, missing_ok=True)
        except ApiError:
            return ""
        return lines[0] if lines else ""

    def _opt_or_none(self, path: str) -> str | None:
        """Like _opt, but None when IMDS answers 404 (the entry does not exist), apart from
        "" when the read failed otherwise."""
        try:
            lines = self._lines(path, missing_ok=True)
        except ApiError:
            return ""
        return lines[0] if lines else None

    def enis(self, ipv6: bool = False) -> list[EniView]:
        out = []
        for entry in self._lines("network/interfaces/macs/"):
            mac = entry.rstrip("/")
            base = f"network/interfaces/macs/{mac}/"
            try:
                eni_id = self._lines(base + "interface-id")[0]
                device = int(self._lines(base + "device-number")[0])
            except (IndexError, ValueError):
                # Upstream fails the whole read when one ENI's entries are unreadable.
                raise ApiError(f"IMDS {base}: unreadable interface entries", "BadMetadata") from None
            ips = self._lines(base + "local-ipv4s", missing_ok=True)
            prefixes = self._lines(base + "ipv4-prefix", missing_ok=True)
            cidr = self._opt_or_none(base + "subnet-ipv4-cidr-block")
            view = EniView(eni_id=eni_id, mac=mac, device_index=device,
                           primary_ip=ips[0] if ips else "", ips=ips, prefixes=prefixes,
                           subnet_cidr=cidr)
            if ipv6:
                view.ipv6s = self._lines(base + "ipv6s", missing_ok=True)
                view.ipv6_prefixes = self._lines(base + "ipv6-prefix", missing_ok=True)
                blocks = self._lines(base + "subnet-ipv6-cidr-blocks", missing_ok=True)
                view.subnet_ipv6_cidr = blocks[0] if blocks else None
            out.append(view)
        return out
