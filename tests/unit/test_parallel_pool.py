"""The worker pool behind `--jobs`: a worker takes one run after another, and a run that
cannot start is that run's error record, not the end of the others."""

from __future__ import annotations

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
