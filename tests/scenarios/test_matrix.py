"""Every scenario against every built-in profile, asserting the verdict its profile expects.

Each profile runs as a build the kit did not write would: from a target file (the one
`cnikit certify --init` writes, with the profile's name in its environment), its daemon's
command line only, observed from outside (the private status API is off in every run).
With `--cnikit-target FILE` the same scenarios run against that build instead, each
expected to hold.

Test ids name the scenario, the build and the seed, e.g.
`test_matrix[imds-stale-equal-length-vpc-cni-1.18.3-seed1]`. The verdict comes from the
checkers watching the live cluster; a wrong verdict fails with the run's evidence and report.
A cell also asserts what tests/scenarios/cell_checks.py registers for its scenario and build.
"""

from __future__ import annotations

import os

import pytest

from cnikit import scenarios
from cnikit.check.exposure import lines as exposure_lines
from cnikit.pytest_plugin import chosen_target
from cnikit.targets import builtin, builtin_names
from tests.scenarios import cell_checks
from tests.too_slow import skip_if_run_too_slow

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]


def _cells(config) -> list[tuple[str, str]]:
    target = chosen_target(config)
    if target is not None:
        return [(name, target.name) for name in scenarios.names()
                if target.runs(scenarios.get(name))]
    return [(name, profile) for name in scenarios.names() for profile in builtin_names()
            if builtin(profile).runs(scenarios.get(name))
            and builtin(profile).expected(name) is not None]


def pytest_generate_tests(metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        seeds = range(1, metafunc.config.getoption("--scenario-seeds") + 1)
        cells = [(n, p, s) for n, p in _cells(metafunc.config) for s in seeds]
        metafunc.parametrize("cell", cells, ids=[f"{n}-{p}-seed{s}" for n, p, s in cells])


@pytest.fixture(scope="module")
def target_files(tmp_path_factory, pytestconfig) -> dict:
    """build name -> (what to run, expected verdict per scenario)."""
    from cnikit.certify import template

    target = chosen_target(pytestconfig)
    if target is not None:
        return {target.name: (target, target.expected)}
    d = tmp_path_factory.mktemp("targets")
    return {p: (str(template.write(d / f"{p}.toml", profile=p)), builtin(p).expected)
            for p in builtin_names()}


def _explain(r) -> str:
    lines = [f"{r.scenario} [{r.profile}] seed {r.seed}: {r.verdict} "
             f"({r.seconds:.1f}s)"]
    if r.precondition:
        lines.append(f"precondition not met: {r.precondition}")
    if r.error:
        lines.append(f"scenario error: {r.error}")
    lines += r.evidence()
    # The report's folder goes with pytest's tmp_path: what a CI failure needs to be read
    # later goes in its message (a verdict that differs from the table's is rare, and then
    # the steps, what the faults reached and the daemon's decisions tell why).
    lines += [f"step +{s['t']:.2f}s {s['title']}" for s in r.steps]
    lines += exposure_lines(r.exposure)
    for node, events in (r.daemon_events or {}).items():  # timed from its first decision
        lines += [f"{node} daemon +{e['t'] - events[0]['t']:.2f}s "
                  f"{ {k: v for k, v in e.items() if k != 't'} }" for e in events[-40:]]
    lines.append(f"report: {r.report}")
    return "\n".join(lines)


@pytest.mark.timeout(180)
def test_matrix(cell, target_files, tmp_path, pytestconfig):
    name, build, seed = cell
    target, expected = target_files[build]
    print(f"scenario {name} build {build} ({target}) seed {seed}")
    # A user's build (--cnikit-target) may share a profile's name; the checks are the kit's.
    users = chosen_target(pytestconfig) is not None
    checks = [] if users else cell_checks.for_cell(name, build, seed)
    seen: dict = {}

    def on_step(ctx, title, focus) -> None:
        for c in checks:
            if c.during is not None:
                c.during(ctx, seen)

    r = scenarios.run(name, target, seed=seed, report_dir=tmp_path / "report", on_step=on_step)
    skip_if_run_too_slow(r, f"{name} [{build}]")
    exposure = r.exposure or {}
    if expected(name) == "violation" and r.verdict == "holds" and \
            exposure.get("exposed") is False:
        # The fault never reached the build this run (seen in CI, before releases were taken
        # on the gate's after-call hook: the build assigned a released address again before
        # another interface took it): no evidence either way, said rather than failed.
        why = "; ".join(exposure.get("adapted") or []) or "its faults reached nothing"
        pytest.skip(f"{name} [{build}]: not exposed this run ({why}), so the expected "
                    "violation could not show")
    assert r.verdict == expected(name), _explain(r)
    for c in checks:
        print(f"check {c.name}")
        c.after(r, seen)


@pytest.mark.chaos_long
@pytest.mark.timeout(900)
def test_random_chaos_long_hardened(chaos_seed, tmp_path, request):
    duration = request.config.getoption("--chaos-duration")
    print(f"random-chaos seed {chaos_seed} for {duration}s on hardened")
    r = scenarios.run("random-chaos", profile="hardened", seed=chaos_seed, duration=duration,
                      report_dir=tmp_path / "report")
    assert r.verdict == "holds", _explain(r)
