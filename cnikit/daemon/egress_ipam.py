"""IPv4 egress addresses for IPv6 pods, handed out as upstream's egress-cni gets them from
the `host-local` IPAM plugin: round robin over the range from the last one reserved,
skipping the network address, the gateway (the first host) and the broadcast address; one
file per address in a data directory, so a restart keeps what is held.

A DEL frees the address at once; the next ADDs move on from the last one reserved, so it
comes back only when the range wraps (a small range, or a long run of pods).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


class EgressExhausted(Exception):
    pass


class EgressIpam:
    """One daemon's: it alone writes the directory, so what is held is read once, at
    start-up (a restart keeps it), and then kept in memory beside the files."""

    def __init__(self, egress_range: str, data_dir: str | os.PathLike):
        net = ipaddress.IPv4Network(egress_range)
        self.first = int(net.network_address) + 2  # .1 is the pods' gateway
        self.last = int(net.broadcast_address) - 1
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._last_file = self.dir / "last_reserved_ip.0"
        self._held = self._read()  # address -> owner
        try:
            self._next = int(ipaddress.IPv4Address(self._last_file.read_text().strip())) + 1
        except (OSError, ValueError):
            self._next = self.first

    def _read(self) -> dict[str, str]:
        out = {}
        for f in self.dir.iterdir():
            try:
                ipaddress.IPv4Address(f.name)
            except ValueError:
                continue  # last_reserved_ip.0, a write in progress
            out[f.name] = f.read_text().strip()
        return out

    def allocate(self, owner: str) -> str:
        """The owner's address (the same one again for the same owner), else the next free
        one after the last reserved."""
        for ip, who in self._held.items():
            if who == owner:
                return ip
        size = self.last - self.first + 1
        for i in range(size):
            value = self.first + (self._next - self.first + i) % size
            ip = str(ipaddress.IPv4Address(value))
            if ip not in self._held:
                _write(self.dir / ip, owner)
                _write(self._last_file, ip)
                self._held[ip] = owner
                self._next = value + 1
                return ip
        raise EgressExhausted(f"no free IPv4 egress address in {self.dir}")

    def release(self, owner: str) -> str | None:
        for ip, who in list(self._held.items()):
            if who == owner:
                (self.dir / ip).unlink(missing_ok=True)
                del self._held[ip]
                return ip
        return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
