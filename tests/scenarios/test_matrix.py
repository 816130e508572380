"""Every scenario against every profile, asserting the verdict the issue's matrix expects.

Test ids name the scenario, the profile and the seed, e.g.
`test_matrix[imds-stale-equal-length-vpc-cni-1.18.3-seed1]`. The verdict comes from the
checkers watching the live cluster; a wrong verdict fails with the run's evidence and report.
"""

from __future__ import annotations

import os

import pytest

from cnikit import scenarios
from cnikit.targets import builtin_names

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

CELLS = [(name, profile) for name in scenarios.names() for profile in builtin_names()
         if scenarios.get(name).expected.get(profile) is not None]


def pytest_generate_tests(metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        seeds = range(1, metafunc.config.getoption("--scenario-seeds") + 1)
        cells = [(n, p, s) for n, p in CELLS for s in seeds]
        metafunc.parametrize("cell", cells, ids=[f"{n}-{p}-seed{s}" for n, p, s in cells])


def _explain(r) -> str:
    lines = [f"{r.scenario} [{r.profile}] seed {r.seed}: {r.verdict}, expected {r.expected} "
             f"({r.seconds:.1f}s)"]
    if r.error:
        lines.append(f"scenario error: {r.error}")
    lines += r.evidence()
    lines.append(f"report: {r.report}")
    return "\n".join(lines)


@pytest.mark.timeout(180)
def test_matrix(cell, tmp_path):
    name, profile, seed = cell
    print(f"scenario {name} profile {profile} seed {seed}")
    r = scenarios.run(name, profile=profile, seed=seed, report_dir=tmp_path / "report")
    assert r.verdict == r.expected, _explain(r)


@pytest.mark.chaos_long
@pytest.mark.timeout(900)
def test_random_chaos_long_hardened(chaos_seed, tmp_path, request):
    duration = request.config.getoption("--chaos-duration")
    print(f"random-chaos seed {chaos_seed} for {duration}s on hardened")
    r = scenarios.run("random-chaos", profile="hardened", seed=chaos_seed, duration=duration,
                      report_dir=tmp_path / "report")
    assert r.verdict == "holds", _explain(r)
