"""The docs' `--jobs` figures agree with the CLI's default (cnikit.scenarios.parallel): a
table cell that calls its count the default is the default on the 2 cores the docs measure
on, unless it says it was the default then; the prose says how many per core."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cnikit.scenarios import parallel

DOCS = sorted((Path(__file__).resolve().parents[2] / "docs").glob("*.md"))
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 10: "ten"}


def default_on(cores: int, monkeypatch) -> int:
    monkeypatch.setattr(parallel, "cores", lambda: cores)
    return parallel.default_jobs()


def jobs_cells(text: str) -> list[str]:
    """Every cell of a `--jobs` column of the markdown tables in text."""
    out, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if column is None:
            column = next((i for i, c in enumerate(cells) if c == "`--jobs`"), -1)
        elif column >= 0 and not set(line) <= set("|-: ") and column < len(cells):
            out.append(cells[column])
    return out


def test_a_table_that_says_default_says_the_cli_default(monkeypatch):
    now = default_on(2, monkeypatch)
    cells = [(doc.name, c) for doc in DOCS for c in jobs_cells(doc.read_text())]
    assert cells, "the docs measure --jobs somewhere"
    claimed = [(name, c) for name, c in cells if "default" in c and "then" not in c]
    assert claimed, "the docs name the default"
    for name, cell in claimed:
        count = int(re.match(r"\d+", cell).group())
        assert count == now, f"{name}: `{cell}` is not the default on 2 cores ({now})"


@pytest.mark.parametrize("doc", ["ci.md"])
def test_the_prose_says_how_many_per_core(doc, monkeypatch):
    text = (Path(__file__).resolve().parents[2] / "docs" / doc).read_text()
    per_core = default_on(1, monkeypatch)
    assert f"default is {WORDS[per_core]} per core" in " ".join(text.split()), doc
