"""`cnikit cleanup --dry-run` on this machine as it is (other runs live or dead beside it):
every line it lists is counted in its summary, a dead run's container of this test's own
included, and nothing is removed. Only a dry run: a real cleanup would sweep other people's
dead runs, so it is left to the exclusive tests (test_fabric_cleanup.py)."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from cnikit.containers.podman import LABEL_KIT, LABEL_RUN, Podman
from tests.integration.conftest import needs_root

pytestmark = [pytest.mark.root, needs_root]
CNIKIT = str(Path(sys.executable).with_name("cnikit"))
SUMMARY = re.compile(r"^cnikit cleanup \(dry run\): would remove (\d+) namespaces, (\d+) "
                     r"processes, (\d+) state directories, (\d+) containers of runs (.+)$")


@pytest.fixture
def dead_container(tmp_path):
    """A container labelled as the kit's, of a run id no live run has (never started: an
    empty root filesystem, no image needed); removed by name afterwards."""
    p = Podman()
    if p.available() is not None:
        pytest.skip(f"podman: {p.available()}")
    rid = "zq" + secrets.token_hex(2)[:3]
    name = f"ck-{rid}-dryrun"
    p.out("create", "--name", name, "--label", f"{LABEL_KIT}=test", "--label",
          f"{LABEL_RUN}={rid}", "--rootfs", str(tmp_path), "/bin/true")
    yield p, name, rid
    p.run("rm", "-f", name, check=False)


def test_the_summary_counts_what_it_lists_and_nothing_is_removed(dead_container):
    p, name, rid = dead_container
    out = subprocess.run([CNIKIT, "cleanup", "--dry-run"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    m = SUMMARY.match(lines[-1])
    assert m, out.stdout
    listed = [line.split(" ", 1)[0] for line in lines[:-1]]
    assert [int(x) for x in m.groups()[:4]] == [listed.count(k) for k in (
        "namespace", "process", "directory", "container")], out.stdout
    assert p.inspect(name) is not None  # a dry run removed nothing
    # Still there after the dry run, so there during it: listed, and its run named.
    assert f"container {name}" in lines and rid in m.group(5), out.stdout
