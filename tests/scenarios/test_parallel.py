"""The matrix in parallel and in shards: `--jobs 2` gives the table of one run at a time,
and three shards merged with `cnikit report merge` give the unsharded table, one of them
empty (a CI job matrix with more runners than cells)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

# One of the cheapest scenarios (about 8 s a run) on two profiles: two cells, a violation
# and a hold, over three shards. The cells and their verdicts are what is tested, not the
# scenario (the split itself is unit-tested over whole plans).
CELLS = ["-s", "restart-stale-imds", "-p", "vpc-cni-1.18.3", "-p", "hardened"]


def _cnikit(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "cnikit.cli", *args], capture_output=True,
                       text=True, timeout=900)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _table(path) -> dict:
    doc = json.loads(path.read_text())
    return {(name, col): (cell["verdict"], cell["expected"], [r["seed"] for r in cell["runs"]])
            for name, row in doc["cells"].items() for col, cell in row.items()}


@pytest.mark.timeout(900)
def test_jobs_and_three_merged_shards_give_the_table_of_one_run_at_a_time(tmp_path):
    whole = _cnikit("matrix", *CELLS, "--jobs", "2", "--report", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "in flight" in whole.stderr
    table = _table(tmp_path / "whole" / "matrix.json")
    assert len(table) == 2
    assert table[("restart-stale-imds", "vpc-cni-1.18.3")][0] == "violation"
    assert table[("restart-stale-imds", "hardened")][0] == "holds"
    # The shards run at once, as on three CI runners; the third has no cell.
    shards = [subprocess.Popen([sys.executable, "-m", "cnikit.cli", "matrix", *CELLS, "--shard",
                                f"{i}/3", "--jobs", "1", "--report", str(tmp_path / f"s{i}")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in (1, 2, 3)]
    for p in shards:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0 and "Traceback" not in err, out + err
    parts = [_table(tmp_path / f"s{i}" / "matrix.json") for i in (1, 2, 3)]
    assert sorted(len(x) for x in parts) == [0, 1, 1]
    merged = _cnikit("report", "merge", *(str(tmp_path / f"s{i}") for i in (1, 2, 3)),
                     "--out", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert _table(tmp_path / "merged" / "matrix.json") == table
    assert (tmp_path / "merged" / "junit.xml").is_file()
