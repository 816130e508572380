"""The machine's record of how long runs took (cnikit.scenarios.durations): what the longest-
first order falls back on in a fresh report directory."""

from __future__ import annotations

from cnikit.scenarios import durations
from cnikit.scenarios.parallel import longest_first


def test_saved_times_come_back_and_order_the_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("CNIKIT_CACHE_DIR", str(tmp_path / "cache"))
    assert durations.load() == {}
    durations.save([("restart-while-detaching", "hardened", 67.3), ("imds-outage", "hardened", 10.7),
                    ("imds-outage", "vpc-cni-1.18.3", 12.0), ("broken", "hardened", None)])
    known = durations.load()
    assert durations.guess(known, "restart-while-detaching", "hardened") == 67.3
    # Another target's time, the longest, for a build not run before.
    assert durations.guess(known, "imds-outage", "my-build") == 12.0
    assert durations.guess(known, "broken", "hardened") is None
    assert durations.guess(known, "never-run", "hardened") is None
    names = ["imds-outage", "never-run", "restart-while-detaching"]
    order = longest_first(names, lambda n: durations.guess(known, n, "hardened"))
    assert [names[i] for i in order] == ["restart-while-detaching", "imds-outage", "never-run"]


def test_an_unreadable_or_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CNIKIT_CACHE_DIR", str(tmp_path))
    (tmp_path / "run-seconds.json").write_text("{not json")
    assert durations.load() == {}
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("CNIKIT_CACHE_DIR", str(blocked / "under-a-file"))
    durations.save([("imds-outage", "hardened", 10.0)])  # nothing raised
    assert durations.load() == {}
