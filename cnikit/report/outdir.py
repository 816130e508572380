"""A report directory that is known to take files, before any run is spent on it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cnikit.errors import UsageError


def writable_dir(path: str | Path, what: str = "the report") -> Path:
    """Make `path` (and its parents) and prove a file can be written in it; a UsageError
    (exit 2, one line) otherwise. Asked before a run, so a run is never spent only to find
    its verdict has nowhere to go: permissions alone do not tell, root ignores them and a
    read-only mount refuses root too."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".cnikit-write-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"cannot write {what} into {out}: {e.strerror or e}") from None
    return out
