"""`cnikit cleanup --dry-run` prints one line per thing it would remove and a summary counted
from those same lists: the summary never says fewer than it lists (containers and images
included)."""

from __future__ import annotations

from cnikit.cluster.cleanup_cli import dry_run_lines
from cnikit.fabric.cleanup import Report


def test_the_summary_counts_every_listed_line_containers_included():
    report = Report(runs=["a1b2c"], namespaces=["ck-a1b2c-vpc", "ck-a1b2c-n0"],
                    processes=[4242], directories=["/dev/shm/cnikit-a1b2c"])
    lines = dry_run_lines(report, ["ck-d3e4f-n0-daemon"])
    assert lines[:-1] == ["namespace ck-a1b2c-vpc", "namespace ck-a1b2c-n0", "process 4242",
                          "directory /dev/shm/cnikit-a1b2c", "container ck-d3e4f-n0-daemon"]
    assert lines[-1] == ("cnikit cleanup (dry run): would remove 2 namespaces, 1 processes, "
                         "1 state directories, 1 containers of runs a1b2c, d3e4f")


def test_a_container_alone_is_counted_and_images_are_listed_when_asked():
    lines = dry_run_lines(Report(), ["ck-d3e4f-n0-daemon"], (["sha256:1f2e"], None))
    assert lines == ["container ck-d3e4f-n0-daemon", "image sha256:1f2e",
                     "cnikit cleanup (dry run): would remove 0 namespaces, 0 processes, "
                     "0 state directories, 1 containers, 1 images of runs d3e4f"]
    kept = dry_run_lines(Report(), [], ([], "kit containers still exist (a live run?)"))
    assert kept == ["cnikit cleanup (dry run): would remove 0 namespaces, 0 processes, 0 state "
                    "directories, 0 containers, 0 images of runs none; images kept: kit "
                    "containers still exist (a live run?)"]
