"""A small asyncio HTTP/1.1 client for the gate's calls to its upstream.

Why not aiohttp's client (or asyncio streams): a bare socket driven by `loop.sock_*` costs
less per call, and the gate's whole budget is 20% of moto's call. `bench/bench_gate.py`
runs both side by side (2 cores: the gate added 18.8% to moto's Assign median with this
client, 31.8% with aiohttp's); keep this only while that figure says so. The gate only ever POSTs a form body to one origin, so the client is
small: keep-alive sockets are pooled when the upstream allows it (LocalStack does); for an
upstream that closes after every answer (moto's werkzeug always says `Connection: close`)
one spare socket is connected ahead of time. Bodies are read by Content-Length, chunked
encoding, or until close. Plain http only: the upstream is on loopback or in the kit's VPC.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

MAX_IDLE = 16
RECV = 256 * 1024


class UpstreamClient:
    def __init__(self, url: str, timeout: float = 120.0):
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"upstream must be an http:// URL, got {url!r}")
        self.addr = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path or "/"
        self.timeout = timeout
        self._head = f"POST {self.path} HTTP/1.1\r\nHost: {self.addr[0]}:{self.addr[1]}\r\n"
        self._idle: list[socket.socket] = []
        self._warming = False

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = self._head + f"Content-Length: {len(body)}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
            if k.lower() not in ("host", "content-length", "connection"))
        request = (head + "\r\n").encode("latin-1") + body
        return await asyncio.wait_for(self._post(request), self.timeout)

    async def _post(self, request: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        while self._idle:  # a pooled socket the server may have closed meanwhile
            sock = self._idle.pop()
            try:
                return await self._exchange(loop, sock, request)
            except _StaleConnection:
                sock.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await loop.sock_connect(sock, self.addr)
            return await self._exchange(loop, sock, request)
        except BaseException:
            sock.close()
            raise

    async def _exchange(self, loop, sock: socket.socket, request: bytes) -> tuple[int, bytes]:
        try:
            await loop.sock_sendall(sock, request)
            buf = await loop.sock_recv(sock, RECV)
        except ConnectionError as e:
            raise _StaleConnection() from e
        if not buf:
            raise _StaleConnection()
        while (end := buf.find(b"\r\n\r\n")) < 0:
            more = await loop.sock_recv(sock, RECV)
            if not more:
                raise ConnectionError("upstream closed the connection inside the headers")
            buf += more
        lines = buf[:end].decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        fields = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            fields[k.strip().lower()] = v.strip()
        rest = buf[end + 4:]
        close = fields.get("connection", "").lower() == "close" or version != "HTTP/1.1"
        if fields.get("transfer-encoding", "").lower() == "chunked":
            data = await _read_chunked(loop, sock, rest)
        elif "content-length" in fields:
            want = int(fields["content-length"])
            while len(rest) < want:
                more = await loop.sock_recv(sock, RECV)
                if not more:
                    raise ConnectionError("upstream closed the connection inside the body")
                rest += more
            data = rest[:want]
        else:
            while more := await loop.sock_recv(sock, RECV):
                rest += more
            data, close = rest, True
        if close or len(self._idle) >= MAX_IDLE:
            sock.close()
            if not self._idle and not self._warming:
                self._warming = True
                loop.create_task(self._warm_spare(loop))
        else:
            self._idle.append(sock)
        return int(status), data

    async def _warm_spare(self, loop) -> None:
        """Connect the next socket ahead of time: an upstream that closes after every answer
        (moto) then costs no connect (and no server-side thread start) on the next call."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await loop.sock_connect(sock, self.addr)
            self._idle.append(sock)
        except OSError:
            sock.close()
        finally:
            self._warming = False

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


class _StaleConnection(Exception):
    """The server closed a pooled connection before answering: retry on a fresh one."""


async def _read_chunked(loop, sock: socket.socket, buf: bytes) -> bytes:
    out = bytearray()

    async def need(n: int) -> None:
        nonlocal buf
        while len(buf) < n:
            more = await loop.sock_recv(sock, RECV)
            if not more:
                raise ConnectionError("upstream closed the connection inside a chunk")
            buf += more

    while True:
        while (eol := buf.find(b"\r\n")) < 0:
            await need(len(buf) + 1)
        size = int(buf[:eol].split(b";")[0].strip(), 16)
        buf = buf[eol + 2:]
        if size == 0:
            while not buf.startswith(b"\r\n") and b"\r\n\r\n" not in buf:
                await need(len(buf) + 1)
            return bytes(out)
        await need(size + 2)
        out += buf[:size]
        buf = buf[size + 2:]
