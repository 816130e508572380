"""The `ipam.json` checkpoint in upstream's `vpc-cni-ipam/1` format.

Written by temp file + fsync + rename (and a directory fsync), so a crash at any
moment leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FORMAT_VERSION = "vpc-cni-ipam/1"
RELEASED_VERSION = "cnikit-released/1"
COOLING_KEY = "cnikitCooling"


class CheckpointError(Exception):
    pass


def document(allocations: list[dict], cooling: dict[str, int] | None) -> dict:
    """Upstream's document; the IP cooldowns ride along under a key upstream ignores, so a
    restarted daemon can keep them (written in the same atomic write as the DEL they follow)."""
    doc = {"version": FORMAT_VERSION, "allocations": allocations}
    if cooling:
        doc[COOLING_KEY] = cooling
    return doc


def cooling_of(doc: dict) -> dict[str, int]:
    try:
        return {str(a): int(t) for a, t in (doc.get(COOLING_KEY) or {}).items()}
    except (TypeError, ValueError, AttributeError):
        return {}


class JsonCheckpoint:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def write(self, allocations: list[dict], cooling: dict[str, int] | None = None) -> None:
        self._write(document(allocations, cooling))

    def _write(self, data: dict) -> None:
        tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(data, separators=(",", ":")).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def read(self) -> list[dict]:
        """The allocations, [] when no file exists (a fresh node). A bad file is an error."""
        data = self._read()
        allocations = data.get("allocations") or []
        if not isinstance(allocations, list):
            raise CheckpointError(f"{self.path}: allocations is not a list")
        return allocations

    def read_cooling(self) -> dict[str, int]:
        """Pods' addresses still in their IP cooldown when the file was written (address ->
        wall-clock ns of the pod's DEL). A hint: anything unreadable is no cooldown."""
        try:
            return cooling_of(self._read())
        except CheckpointError:
            return {}

    def _read(self) -> dict:
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return {"version": FORMAT_VERSION, "allocations": []}
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise CheckpointError(f"{self.path}: not JSON ({e})") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise CheckpointError(f"{self.path}: unexpected checkpoint version {data.get('version')!r}"
                                  if isinstance(data, dict) else f"{self.path}: not a checkpoint")
        return data

    # The node's own recent releases (address -> wall-clock ns), in a file of their own
    # beside the checkpoint: a restarted daemon must not take back an address it released
    # while EC2's views still show it. A hint: a missing or unreadable file is no release.

    @property
    def released_path(self) -> Path:
        return self.path.with_name(f"{self.path.stem}.released.json")

    def write_released(self, released: dict[str, int]) -> None:
        JsonCheckpoint(self.released_path)._write({"version": RELEASED_VERSION,
                                                   "released": released})

    def read_released(self) -> dict[str, int]:
        try:
            data = json.loads(self.released_path.read_text())
            released = data["released"] if data.get("version") == RELEASED_VERSION else {}
            return {str(a): int(t) for a, t in released.items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}


class MemoryCheckpoint:
    """For unit tests: keeps the last written document; `fail` makes the next writes raise."""

    def __init__(self, allocations: list[dict] | None = None):
        self.doc = {"version": FORMAT_VERSION, "allocations": list(allocations or [])}
        self.released: dict[str, int] = {}
        self.writes = 0
        self.fail = False

    def write(self, allocations: list[dict], cooling: dict[str, int] | None = None) -> None:
        if self.fail:
            raise OSError("checkpoint write failed (injected)")
        self.doc = json.loads(json.dumps(document(allocations, cooling)))
        self.writes += 1

    def read(self) -> list[dict]:
        return list(self.doc["allocations"])

    def read_cooling(self) -> dict[str, int]:
        return cooling_of(self.doc)

    def write_released(self, released: dict[str, int]) -> None:
        self.released = dict(released)

    def read_released(self) -> dict[str, int]:
        return dict(self.released)
