"""The shell blocks of the README and the docs, as a reader pastes them: they parse, and
every fault they add ends by itself (one pasted alone must not leave a permanent limit)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "fault_imds" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


def shell_blocks() -> list[tuple[str, str]]:
    """(where, text) of every ```sh block."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{doc.relative_to(ROOT)}:{line}", m.group(1)))
    return out


def commands(block: str) -> list[list[str]]:
    """Each command line of a block as words (continuations joined, comments dropped)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


BLOCKS = shell_blocks()


def test_there_are_blocks_to_check():
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("where,block", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_each_block_parses_as_shell(where, block):
    p = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"{where}: {p.stderr}"


def fault_bodies() -> list[tuple[str, str, dict]]:
    """(where, API variable, body) of every fault a block POSTs to $CONTROL or $GATE."""
    from cnikit.cloud.faults import KINDS as EC2_KINDS
    from fault_imds.faults import KINDS as IMDS_KINDS

    kinds = {"$CONTROL": IMDS_KINDS, "$GATE": EC2_KINDS}
    out = []
    for where, block in BLOCKS:
        for words in commands(block):
            url = next((w for w in words if w.endswith("/faults")), None)
            if words[0] != "curl" or "-d" not in words or url is None:
                continue
            api = url.rsplit("/", 1)[0]
            body = json.loads(words[words.index("-d") + 1])
            assert api in kinds, f"{where}: a fault posted to {url}"
            assert body["kind"] in kinds[api], f"{where}: {body['kind']} is no kind of {api}"
            out.append((where, api, body))
    return out


def test_every_fault_example_ends_by_itself():
    bodies = fault_bodies()
    assert {api for _, api, _ in bodies} == {"$CONTROL", "$GATE"}
    lasting = [f"{where}: {json.dumps(body)}" for where, _, body in bodies
               if not isinstance(body.get("duration"), (int, float))]
    assert lasting == [], "pasted alone, these faults stay until removed: give each a duration"
