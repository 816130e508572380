"""The worker pool behind `--jobs`: a worker takes one run after another, and a run that
cannot start is that run's error record, not the end of the others."""

from __future__ import annotations

import json

from cnikit.scenarios import parallel


def test_one_worker_takes_run_after_run_and_a_bad_spec_is_an_error_record(tmp_path, monkeypatch):
    started = []
    new = parallel.Worker.__init__

    def counting(self):
        started.append(self)
        new(self)

    monkeypatch.setattr(parallel.Worker, "__init__", counting)
    spec = lambda name: {"scenario": name, "seed": 1, "target": "hardened",  # noqa: E731
                         "root": str(tmp_path)}
    recs = parallel.run_specs(["no-such-1", "no-such-2", "no-such-3"], spec, jobs=1)
    assert [r["verdict"] for r in recs] == ["error"] * 3
    assert [r["scenario"] for r in recs] == ["no-such-1", "no-such-2", "no-such-3"]
    assert all(r["error"].startswith("worker: cnikit: unknown scenario") for r in recs), recs
    assert len(started) == 1
    assert started[0].proc.wait(10) == 0  # ended when the plan was done


def test_a_worker_that_dies_is_its_runs_error_and_the_next_run_gets_a_new_one(tmp_path):
    pool = parallel.Pool(1)
    first = pool.run({"scenario": "no-such", "seed": 1, "target": "hardened",
                      "root": str(tmp_path)})
    (w,) = pool._idle
    w.proc.kill()
    w.proc.wait(10)
    died = pool.run({"scenario": "no-such", "seed": 2, "target": "hardened",
                     "root": str(tmp_path)})
    assert first["verdict"] == died["verdict"] == "error"
    assert died["seed"] == 2 and died["error"].startswith("worker: ")
    again = pool.run({"scenario": "no-such", "seed": 3, "target": "hardened",
                      "root": str(tmp_path)})
    assert "unknown scenario" in again["error"]
    assert pool._idle and pool._idle[0] is not w
    pool.close()


def test_the_longest_runs_start_first_and_records_keep_the_plan_order(tmp_path, monkeypatch):
    started = []

    class OneAtATime:
        def __init__(self, jobs):
            pass

        def run(self, spec):
            started.append(spec["name"])
            return {"name": spec["name"]}

        def close(self):
            pass

    monkeypatch.setattr(parallel, "Pool", OneAtATime)
    last_time = {"a": 5.0, "b": None, "c": 40.0, "d": 12.5}
    records = parallel.run_specs(list(last_time), lambda n: {"name": n}, jobs=2,
                                 seconds_of=last_time.get)
    assert [r["name"] for r in records] == ["a", "b", "c", "d"]
    assert sorted(started) == ["a", "b", "c", "d"]
    # the order the runs are handed to the pool: longest known first, unknown last
    assert parallel.longest_first(list(last_time), last_time.get) == [2, 3, 0, 1]


def test_past_seconds_reads_the_last_report_and_tolerates_none(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "report.json").write_text(json.dumps({"verdict": "holds", "seconds": 21.5}))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text("{not json")
    assert parallel.past_seconds(tmp_path / "ok") == 21.5
    assert parallel.past_seconds(tmp_path / "bad") is None
    assert parallel.past_seconds(tmp_path / "missing") is None
    assert parallel.past_seconds(None) is None
