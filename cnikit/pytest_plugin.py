"""pytest plugin for cnikit (entry point `pytest11`).

Options: `--cnikit-profile` (daemon profile), `--cnikit-target FILE` (the build under test,
docs/certify.md; overrides the profile), `--cnikit-ec2` (moto or localstack behind the
gate), `--cnikit-report DIR` (write a report for every test that uses `invariants`; without
it a report is written only when an invariant breaks, under pytest's temp directory).

Fixtures (see docs/pytest.md):
  cloud       the embedded EC2 (one per session; EC2 faults cleared after each test):
              .ec2 (boto3 client on the gate), .faults (gate faults), .gate, .endpoint,
              .nemesis (the test's nemesis: cnikit.cluster.nemesis)
  imds        FaultClient of a fault IMDS following that cloud (one per test; .server, .url)
  Every fault added through .faults or imds, and every daemon kill or restart of a cluster,
  is a nemesis operation in each cluster's history (the report draws it).
  cluster     factory: cluster(nodes=2, pods=0, profile=None) -> a VPC with the daemon on
              every node; .add_pod/.delete_pod/.kill_daemon/.restart_daemon/.unassign/.status
  invariants  the checkers on every cluster of the test; when the test body returns, any
              violation fails the test with what broke, when, which pod and IP, and the report
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

# The plugin's state on pytest's objects, in their stash (pytest's place for a plugin's own).
TARGET = pytest.StashKey[object]()  # config: the --cnikit-target build, resolved
KIT = pytest.StashKey[object]()  # item: the test's Kit (cnikit.testkit)
REPORT_BASE = pytest.StashKey[Path]()  # item: where a report goes without --cnikit-report
SLOWER = pytest.StashKey[float]()  # item: this run's time-scale factor (adapt)
TRIED = pytest.StashKey[list]()  # item: the runs judged too slow before this one
SCALE = pytest.StashKey[float]()  # item: the time scale the test ran at
TOO_SLOW = pytest.StashKey[str | None]()  # item: why this run was too slow, if it was


def chosen_target(config):
    """The build --cnikit-target named (a cnikit.targets Target), or None."""
    return config.stash.get(TARGET, None)


def pytest_addoption(parser) -> None:
    from cnikit.targets import builtin_names, default_name

    group = parser.getgroup("cnikit")
    group.addoption(
        "--cnikit-profile",
        default=default_name(),
        choices=builtin_names(),
        help=f"daemon profile (a built-in target): {', '.join(builtin_names())}; "
             f"default {default_name()}",
    )
    group.addoption(
        "--cnikit-ec2",
        default="moto",
        choices=("moto", "localstack"),
        help="EC2 upstream behind the gate (default: embedded moto)",
    )
    group.addoption(
        "--cnikit-target",
        default=None,
        metavar="FILE",
        help="the build under test: a target file (docs/certify.md) or a built-in name; "
             "overrides --cnikit-profile",
    )
    group.addoption(
        "--cnikit-ip-family",
        default=None,
        choices=("ipv4", "ipv6", "dual"),
        help="the pods' address family in every cluster: ipv6 is a dual-stack VPC with the "
             "build in its IPv6 mode (default: the target's ip_family, else ipv4)",
    )
    group.addoption("--cnikit-report", default=None, help="directory for run reports")
    group.addoption(
        "--cnikit-shard",
        default=None,
        metavar="I/N",
        help="run only the I-th of N deterministic shares of the collected tests "
             "(one per CI runner)",
    )
    group.addoption(
        "--cnikit-runtime",
        default=None,
        choices=("process", "podman", "docker"),
        help="how each node's daemon runs (default $CNIKIT_RUNTIME or process)",
    )


def pytest_configure(config) -> None:
    from cnikit import pytest_root

    config.addinivalue_line("markers", "cnikit: uses the cnikit fixtures")
    config.pluginmanager.register(pytest_root, "cnikit-root")
    target = config.getoption("--cnikit-target", None)
    if target:
        from cnikit.errors import CnikitError
        from cnikit.targets import resolve_target

        try:  # a bad target file stops the session in one line, before any test runs
            config.stash[TARGET] = resolve_target(target)
        except CnikitError as e:
            raise pytest.UsageError(f"--cnikit-target: {e}") from None
    report = config.getoption("--cnikit-report", None)
    if report:
        from cnikit.errors import CnikitError
        from cnikit.report.outdir import writable_dir

        try:  # before any test runs, not at the first report a test writes
            writable_dir(report)
        except CnikitError as e:
            raise pytest.UsageError(f"--cnikit-report: {e}") from None
    runtime = config.getoption("--cnikit-runtime", None)
    if runtime:
        from cnikit.containers.noderuntime import check_runtime
        from cnikit.errors import CnikitError

        try:
            check_runtime(runtime)
        except CnikitError as e:
            raise pytest.UsageError(f"--cnikit-runtime {runtime}: {e}") from None
        os.environ["CNIKIT_RUNTIME"] = runtime  # CniCluster's default runtime


def _build_name(config) -> str:
    target = chosen_target(config)
    return target.name if target is not None else config.getoption("--cnikit-profile")


def pytest_generate_tests(metafunc) -> None:
    # A test on a cluster names the build it ran against: test_x[hardened] in reports and
    # JUnit files, so runs against different builds never share a test name.
    if "cnikit_build" in metafunc.fixturenames:
        name = _build_name(metafunc.config)
        metafunc.parametrize("cnikit_build", [name], ids=[name], indirect=True)


def pytest_collection_modifyitems(config, items) -> None:
    shard = config.getoption("--cnikit-shard", None)
    if not shard:
        return
    from cnikit.errors import CnikitError
    from cnikit.scenarios.parallel import parse_shard

    try:
        i, n = parse_shard(shard)
    except CnikitError as e:
        raise pytest.UsageError(f"--cnikit-shard: {e}") from None
    # By node id, so every runner computes the same split from the same tree.
    order = sorted(range(len(items)), key=lambda k: items[k].nodeid)
    keep = {k for pos, k in enumerate(order) if pos % n == i - 1}
    deselected = [it for k, it in enumerate(items) if k not in keep]
    items[:] = [it for k, it in enumerate(items) if k in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)


@pytest.fixture
def cnikit_build(request) -> str:
    """The name of the build under test (a profile or a target's name)."""
    return getattr(request, "param", None) or _build_name(request.config)


def pytest_report_header(config) -> str:
    report = config.getoption("--cnikit-report")
    target = chosen_target(config)
    build = (f"target={target.name} {target.version}" if target is not None
             else f"profile={config.getoption('--cnikit-profile')}")
    return (f"cnikit: {build} "
            f"ec2={config.getoption('--cnikit-ec2')}"
            + (f" reports={report}" if report else ""))


class CloudFixture:
    """The session's Cloud with the two things tests reach for: the EC2 client and faults
    (the gate's, added and removed through the test's nemesis, so each is recorded)."""

    def __init__(self, cloud, nemesis):
        self.cloud = cloud
        self.gate = cloud.gate
        self.nemesis = nemesis
        self.faults = nemesis.ec2
        self.endpoint = cloud.endpoint
        self.ec2 = cloud.client()

    def __getattr__(self, name):  # client(), bootstrap(), region, upstream_url, ...
        return getattr(self.cloud, name)


@pytest.fixture(scope="session")
def cnikit_options(pytestconfig) -> dict:
    target = chosen_target(pytestconfig)
    return {"profile": target.name if target is not None else pytestconfig.getoption("--cnikit-profile"),
            "target": target,
            "ec2": pytestconfig.getoption("--cnikit-ec2"),
            "ip_family": pytestconfig.getoption("--cnikit-ip-family"),
            "report": pytestconfig.getoption("--cnikit-report")}


@pytest.fixture(scope="session")
def _cnikit_cloud(cnikit_options):
    from cnikit.cloud import Cloud
    from cnikit.errors import CnikitError

    try:
        cloud = Cloud.start(ec2=cnikit_options["ec2"])
    except CnikitError as e:
        pytest.skip(f"cnikit: no EC2 ({cnikit_options['ec2']}): {e}")
    yield cloud
    cloud.stop()


@pytest.fixture
def cloud(_cnikit_cloud, _cnikit_kit):
    """EC2 (moto or LocalStack behind the gate), shared by the session; faults cleared after."""
    yield CloudFixture(_cnikit_cloud, _cnikit_kit.nemesis)
    _cnikit_cloud.gate.faults.clear()


@pytest.fixture
def _cnikit_imds(_cnikit_cloud):
    from fault_imds.server import ImdsServer

    server = ImdsServer(ec2_endpoint=_cnikit_cloud.endpoint).start()
    yield server
    server.stop()


@pytest.fixture
def imds(_cnikit_imds, _cnikit_kit):
    """FaultClient of this test's fault IMDS (it follows the cloud; clusters use it); its
    faults are the test's nemesis operations."""
    client = _cnikit_kit.nemesis.imds
    client.server = _cnikit_imds
    client.imds_url = _cnikit_imds.url
    return client


@pytest.fixture
def _cnikit_kit(request, _cnikit_cloud, _cnikit_imds, cnikit_options, tmp_path_factory):
    from cnikit.testkit import Kit

    kit = Kit(_cnikit_cloud, _cnikit_imds, profile=cnikit_options["profile"],
              target=cnikit_options["target"], ip_family=cnikit_options.get("ip_family"),
              slower=request.node.stash.get(SLOWER, 1.0))
    request.node.stash[KIT] = kit
    if not cnikit_options["report"]:
        request.node.stash[REPORT_BASE] = tmp_path_factory.getbasetemp() / "cnikit-reports"
    yield kit
    # Stop the checkers before any namespace goes away: teardown is not a fault.
    if kit.invariants is not None:
        _finish(request.node, kit)
    kit.close()


@pytest.fixture
def cluster(request, cnikit_build):
    """cluster(nodes=2, pods=0, profile=None, instance_type="m5.large", scale=None, env=None,
    instance_types=None) -> a started cnikit.testkit.Cluster (removed after the test);
    `instance_types` names one type per node."""
    if os.geteuid() != 0:  # before anything starts
        pytest.skip("cnikit cluster needs root: network namespaces")
    return request.getfixturevalue("_cnikit_kit").cluster


@pytest.fixture
def invariants(request, cnikit_build):
    """The checkers, on every cluster this test makes (before or after asking for this)."""
    if os.geteuid() != 0:
        pytest.skip("cnikit invariants need root: the prober enters pod namespaces")
    return request.getfixturevalue("_cnikit_kit").watch()


def _report_dir(item) -> tuple[Path, bool]:
    """(directory, always write) for this test's report."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[:150]
    chosen = item.config.getoption("--cnikit-report")
    if chosen:
        return Path(chosen) / name, True
    return item.stash[REPORT_BASE] / name, False


def _finish(item, kit):
    out, always = _report_dir(item)
    verdict = kit.invariants.finish(out, name=item.nodeid, always_report=always)
    # JUnit properties (pytest --junitxml): what ran, where, and where its report is.
    item.user_properties.append(("cnikit_build", kit.profile))
    for w in kit.invariants.watches.values():
        fabric = getattr(getattr(w, "cluster", None), "fabric", None)
        if fabric is not None:
            item.user_properties.append(("cnikit_run_id", fabric.rid))
    for r in verdict.reports:
        item.user_properties.append(("cnikit_report", str(r["html"])))
    return verdict


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        result = yield
    except BaseException:
        # The test's own failure is the headline; what the checkers saw goes alongside.
        kit = item.stash.get(KIT, None)
        if kit is not None and kit.invariants is not None:
            verdict = _finish(item, kit)
            if not verdict.ok:
                item.add_report_section("call", "cnikit", verdict.statement)
        raise
    kit = item.stash.get(KIT, None)
    if kit is not None and kit.invariants is not None:
        verdict = _finish(item, kit)
        from cnikit.report.words import time_scale_sentence
        from cnikit.scenarios.engine.adapt import every_scale

        tried = item.stash.get(TRIED, [])
        scale = item.stash[SCALE] = kit.scale * kit.slower
        item.user_properties.append(("cnikit_time_scale", scale))
        if verdict.too_slow:  # a busy machine's honest answer, never a false verdict
            too_slow = item.stash[TOO_SLOW] = verdict.statement.splitlines()[0]
            every = every_scale(tried, scale) if tried else ""
            # Reported at the test's own location, as a skip mark's reason is.
            raise pytest.skip.Exception(too_slow + every, _use_item_location=True)
        slowed = time_scale_sentence(scale, tried)
        if slowed:
            item.add_report_section("call", "cnikit", slowed)
        if not verdict.ok:
            pytest.fail(verdict.statement + (f"\n{slowed}" if slowed else ""), pytrace=False)
    return result


KIT_FIXTURES = {"_cnikit_kit", "cluster", "invariants"}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test on the kit's clusters that the machine was too slow to judge is run again,
    whole, at each slower time scale (cnikit.scenarios.engine.adapt: 2x then 4x by
    default) before it is skipped as too slow; the first judged run is the test's result."""
    # cluster and invariants reach the kit at run time (getfixturevalue), so are named too.
    if not KIT_FIXTURES & set(getattr(item, "fixturenames", ())):
        return None
    from _pytest.runner import runtestprotocol

    from cnikit.errors import CnikitError
    from cnikit.scenarios.engine import adapt

    try:
        factors = adapt.factors()
    except CnikitError as e:
        raise pytest.UsageError(str(e)) from None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    tried = item.stash[TRIED] = []
    for n, factor in enumerate(factors):
        item.stash[SLOWER], item.stash[TOO_SLOW] = factor, None
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        too_slow = item.stash[TOO_SLOW]
        if too_slow is None or n == len(factors) - 1:
            break
        tried.append({"scale": item.stash[SCALE], "too_slow": too_slow.removeprefix("cnikit: ")})
        # The JUnit property is the scale of the run that is the result.
        item.user_properties[:] = [p for p in item.user_properties if p[0] != "cnikit_time_scale"]
    for rep in reports:
        item.ihook.pytest_runtest_logreport(report=rep)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
