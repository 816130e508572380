"""Every consumer of the fault kinds registries sees a kind, or a stage, defined in a module
(here, in a fixture of this one) with nothing else edited: `fault-imds add`'s options, both
servers' GET .../kinds, random chaos's draw, the report's fault labels, and the servers'
hook points, which run a newly registered stage. The throwaway kinds and stages are removed
after each test (Kinds.remove, Kinds.remove_stage).

The one-file story end to end, with the packages copied and run as a user runs them, is
tests/unit/test_fault_kinds.py.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request

import pytest
from click.testing import CliRunner

from cnikit.cloud.faults import KINDS as EC2_FAULTS
from cnikit.cloud.faults.base import BEFORE, Call, Chaos, Ec2Fault, Param, Stage
from cnikit.cluster.actions import ACTIONS as NEMESIS_ACTIONS
from fault_imds.cli import cli as fault_imds_cli
from fault_imds.client import FaultClient
from fault_imds.faults import KINDS as IMDS_FAULTS
from fault_imds.faults.base import REQUEST, Answer, ImdsFault
from fault_imds.server import ImdsServer
from faultcore.fault import integer
from faultcore.registry import Registry
from tests.unit.imds_support import Imds

SEED = 20261130


# -- throwaway kinds and stages -----------------------------------------------------------------


@pytest.fixture
def truncate():
    """An IMDS request-stage kind with a new attribute (`bytes`) that changes the body."""

    class Truncate(ImdsFault):
        """Serve only the first `bytes` bytes of the entry."""

        kind = "truncate"
        stage = "request"
        order = 35
        uses_probability = True
        targets = ("instance_id", "mac", "eni_id", "path")
        params = {"bytes": Param(integer(0, 1 << 20), help="bytes kept")}
        description = "serve only the first `bytes` bytes"
        chaos = Chaos(rank=7, draw=lambda rng: {"bytes": rng.randint(0, 16)})

        async def apply(self, req):
            body = req.served()
            return None if body is None else Answer(200, body=body[:self.bytes])

    yield Truncate
    IMDS_FAULTS.remove("truncate")


class ParamsStage(Stage):
    """A stage at the gate's "before" hook point that lets its faults rewrite a call's
    parameters (`apply(call)` edits `call.params`)."""

    def run(self, faults, call: Call) -> None:
        for f in faults:
            f.apply(call)


@pytest.fixture
def partial():
    """An EC2 kind on a new stage ("params", registered here): an Assign gets at most `keep`
    of the addresses it asks for."""
    EC2_FAULTS.add_stage(ParamsStage("params", hook=BEFORE, order=5,
                                     description="the call's parameters, rewritten"))

    class Partial(Ec2Fault):
        kind = "partial"
        stage = "params"
        params = {"keep": Param(integer(1, 10), 1, help="addresses assigned at most")}
        description = "an Assign gets at most `keep` of the addresses it asks for"
        chaos = Chaos(rank=5, draw=lambda rng: {"keep": rng.randint(1, 3)})

        def apply(self, call: Call) -> None:
            count = "SecondaryPrivateIpAddressCount"
            if call.params is not None and count in call.params:
                call.params[count] = str(min(int(call.params[count]), self.keep))

    yield Partial
    EC2_FAULTS.remove("partial")
    EC2_FAULTS.remove_stage("params")


@pytest.fixture
def early():
    """An IMDS stage at the request hook point that runs before the request stage."""

    class EarlyStage(Stage):
        async def run(self, faults, req):
            for f in faults:
                return await f.apply(req)
            return None

    IMDS_FAULTS.add_stage(EarlyStage("early", hook=REQUEST, order=-1))

    class Teapot(ImdsFault):
        kind = "early-teapot"
        stage = "early"
        uses_probability = True
        targets = ("instance_id", "path")
        description = "answer 418 before any request-stage fault"

        async def apply(self, req):
            return Answer(418, body=b"short and stout")

    yield Teapot
    IMDS_FAULTS.remove("early-teapot")
    IMDS_FAULTS.remove_stage("early")


# -- servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instance(gate_cloud):
    return gate_cloud.bootstrap(nodes=1, vpc_cidr="10.77.0.0/16",
                                subnet_cidr="10.77.1.0/24").instances[0]


@pytest.fixture(scope="module")
def server(gate_cloud, instance):
    s = ImdsServer(ec2_endpoint=gate_cloud.endpoint, instance_id=instance.instance_id,
                   seed=SEED).start()
    yield s
    s.stop()


@pytest.fixture
def fc(server):
    client = FaultClient(server.control_url)
    client.clear()
    yield client
    client.clear()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


# -- the consumers ----------------------------------------------------------------------------


def test_fault_imds_add_offers_a_new_kinds_attribute(truncate, server, fc, instance):
    runner = CliRunner()
    helped = runner.invoke(fault_imds_cli, ["add", "--help"])
    assert "--bytes INTEGER" in helped.output and "truncate: bytes kept." in helped.output
    added = runner.invoke(fault_imds_cli, ["add", "truncate", "--bytes", "4", "--path",
                                           "*/instance-id", "--control-url", server.control_url])
    assert added.exit_code == 0, added.output
    fid = added.output.strip()
    assert [(f["id"], f["kind"], f["bytes"]) for f in fc.list()] == [(fid, "truncate", 4)]
    bad = runner.invoke(fault_imds_cli, ["add", "truncate", "--bytes", "many"])
    assert bad.exit_code == 2 and "'many' is not a valid integer" in bad.output
    # The old options are generated too, with their types and help.
    assert "--status INTEGER" in helped.output and "error: HTTP status." in helped.output
    IMDS_FAULTS.remove("truncate")
    assert "--bytes" not in runner.invoke(fault_imds_cli, ["add", "--help"]).output


def test_a_request_stage_fault_may_change_the_body(truncate, server, fc, instance):
    imds = Imds(server.url, instance.instance_id)
    path = "/latest/meta-data/instance-id"
    assert imds.text(path) == instance.instance_id
    fc.add("truncate", target={"path": "*/instance-id"}, bytes=4)
    status, body, ctype = imds.get(path)
    assert (status, body) == (200, instance.instance_id[:4]) and ctype.startswith("text/plain")
    assert imds.text("/latest/meta-data/local-ipv4") == instance.primary_ip  # untargeted
    fc.add("truncate", target={"path": "*/no-such-entry"}, bytes=4)
    assert imds.get("/latest/meta-data/no-such-entry")[0] == 404  # nothing to cut: 404 stands


def test_both_kinds_endpoints_list_new_kinds_and_their_params(truncate, partial, server,
                                                               gate_cloud):
    imds = get_json(server.control_url + "/kinds")
    assert imds["truncate"]["stage"] == "request" and imds["truncate"]["order"] == 35
    assert imds["truncate"]["params"] == {"bytes": {
        "required": True, "check": "an integer in 0..1048576", "help": "bytes kept"}}
    assert imds["truncate"]["chaos"] is True
    assert imds["error"]["params"]["status"] == {
        "required": False, "default": 500, "check": "an integer in 400..599",
        "help": "HTTP status"}
    ec2 = get_json(gate_cloud.endpoint + "/_cnikit/kinds")
    assert ec2["partial"]["stage"] == "params"
    assert ec2["partial"]["params"]["keep"]["default"] == 1
    assert set(ec2) == set(EC2_FAULTS) and ec2["lost-response"]["chaos"] is False
    assert ec2["describe-lag"]["params"]["seconds"]["check"] == "a number >= 0 and <= 300"


def test_random_chaos_draws_new_kinds_with_their_attributes(truncate, partial):
    from cnikit.scenarios.random_chaos import make_schedule

    ops = [op for seed in range(1, 6) for op in make_schedule(seed, 60)]
    cut = [op for op in ops if op["op"] == "imds" and op["kind"] == "truncate"]
    part = [op for op in ops if op["op"] == "ec2" and op["kind"] == "partial"]
    assert cut and all(0 <= op["bytes"] <= 16 for op in cut)
    assert part and all(1 <= op["keep"] <= 3 for op in part)


# -- what a seed draws ---------------------------------------------------------------------------
# A seed's schedule is what its verdicts are tested on (the matrix runs random-chaos), so
# the draw is pinned here on throwaway kinds and actions, not on the kit's own: a kind or an
# action made drawable is its own file alone (it changes every seed's schedule, which the
# matrix's random-chaos verdicts then judge), while a change to how a seed draws (random
# chaos's streams, the registries' order) changes this digest and says so.


def _drawable(name, rank, draw=None, params=(), aim="instance"):
    chaos = Chaos(rank=rank, aim=aim) if draw is None else Chaos(rank=rank, draw=draw, aim=aim)
    return type(name, (), {"kind": name, "name": name, "chaos": chaos,
                           "params": {p: None for p in params}})


THROWAWAY = {
    "imds": [_drawable("i-hold", 1, aim="interface"),
             _drawable("i-slow", 2, lambda rng: {"ms": rng.choice((20, 400))}),
             _drawable("i-fail", 2, lambda rng: {"probability": round(rng.uniform(0.2, 1), 2)}),
             _drawable("i-never", 0, params=("x",))],
    "ec2": [_drawable("e-lag", 1, lambda rng: {"seconds": round(rng.uniform(0.5, 4.0), 2)}),
            _drawable("e-refuse", 3)],
    "nemesis": [_drawable("n-all", 1),
                _drawable("n-node", 2, lambda rng: {"after": rng.choice(("a", "b"))},
                          params=("node",))],
}
THROWAWAY["imds"][-1].chaos = None  # defined, never drawn
DIGEST = "d7d644583b9895583fa24e1e54f1ce70064a4c9dc47c5efe31de55eb0460f7e8"


def _registries(monkeypatch, items: dict[str, list], reverse: bool = False) -> None:
    """The three registries random chaos draws from, holding `items` alone, registered in
    the given order or reversed."""
    from cnikit.cluster.actions import base as actions_base
    from cnikit.scenarios import random_chaos

    regs = {"imds": Registry("fault kind"), "ec2": Registry("EC2 fault kind"),
            "nemesis": Registry("nemesis action")}
    for family, reg in regs.items():
        for cls in (reversed if reverse else list)(items[family]):
            name = getattr(cls, "kind", None) or cls.name  # a fault kind's, an action's
            reg.add(name, cls, f"{family}.{name}")
    monkeypatch.setattr(IMDS_FAULTS, "by_name", regs["imds"])
    monkeypatch.setattr(EC2_FAULTS, "by_name", regs["ec2"])
    monkeypatch.setattr(actions_base, "ACTIONS", regs["nemesis"])
    monkeypatch.setattr(random_chaos, "NEMESIS_ACTIONS", regs["nemesis"])


def _schedules() -> str:
    from cnikit.scenarios.random_chaos import make_schedule

    return json.dumps([make_schedule(seed, 60.0) for seed in range(1, 6)])


@pytest.mark.parametrize("reverse", [False, True])
def test_a_seed_draws_what_it_drew(monkeypatch, reverse):
    _registries(monkeypatch, THROWAWAY, reverse)
    drawn = {"imds": [k.kind for k in IMDS_FAULTS.drawable()],
             "ec2": [k.kind for k in EC2_FAULTS.drawable()]}
    assert drawn == {"imds": ["i-hold", "i-fail", "i-slow"], "ec2": ["e-lag", "e-refuse"]}
    schedules = _schedules()
    assert all(k in schedules for k in ("i-slow", "e-lag", "n-node")), schedules[:400]
    assert hashlib.sha256(schedules.encode()).hexdigest() == DIGEST, \
        "how a seed draws changed: every seed's schedule did too"


def test_the_kits_own_schedules_do_not_depend_on_import_order(monkeypatch):
    """The kinds and actions as the packages registered them, and registered the other way
    round: every seed draws the same."""
    as_imported = _schedules()
    _registries(monkeypatch, {"imds": list(IMDS_FAULTS.by_name.values()),
                              "ec2": list(EC2_FAULTS.by_name.values()),
                              "nemesis": list(NEMESIS_ACTIONS.values())}, reverse=True)
    assert _schedules() == as_imported


def test_the_reports_fault_label_shows_a_new_kinds_attributes(truncate):
    from cnikit.report.timeline import _fault_label

    fault = {"id": "f1", "kind": "truncate", "target": {"path": "*/mac"}, "duration": None,
             "probability": 0.5, "bytes": 4}
    assert _fault_label(fault) == "IMDS truncate bytes=4 probability=0.5 (path=*/mac)"
    # The built-in kinds' labels: attributes at a default that says nothing are left out.
    assert _fault_label({"kind": "latency", "ms": 100.0, "jitter_ms": 0.0,
                         "probability": 1.0}) == "IMDS latency ms=100.0 probability=1.0"
    assert _fault_label({"kind": "error", "status": 500, "probability": 0.5}) == \
        "IMDS error status=500 probability=0.5"


# -- the hook points run registered stages ----------------------------------------------------


def test_the_gate_runs_a_stage_registered_from_a_module(partial, gate_cloud, instance):
    ec2 = gate_cloud.client()
    eni = instance.primary_eni_id
    fid = gate_cloud.gate.faults.add("partial", target={"action": "AssignPrivateIpAddresses"},
                                     keep=1)
    try:
        got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni,
                                              SecondaryPrivateIpAddressCount=3)
        assert len(got["AssignedPrivateIpAddresses"]) == 1
        assert gate_cloud.gate.faults.reached()[fid] == 1
    finally:
        gate_cloud.gate.faults.clear()
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=2)
    assert len(got["AssignedPrivateIpAddresses"]) == 2


def test_the_imds_runs_a_stage_registered_from_a_module(early, server, fc, instance):
    imds = Imds(server.url, instance.instance_id)
    fc.add("error", target={"instance_id": instance.instance_id}, status=503)
    assert imds.get("/latest/meta-data/ami-id")[0] == 503
    fc.add("early-teapot", target={"path": "*/ami-id"})
    status, body, _ = imds.get("/latest/meta-data/ami-id")
    assert (status, body) == (418, "short and stout")  # the early stage answers first
    assert imds.get("/latest/meta-data/instance-id")[0] == 503


def test_random_chaos_draws_the_accounts_throttle_and_error_codes():
    """Issue 30 rows E and H: random chaos throttles the account's bucket as well as a share
    of the calls, and answers errors with other codes than InternalError."""
    from cnikit.cloud.faults.error import DRAWN as CODES
    from cnikit.scenarios.random_chaos import make_schedule

    ops = [op for seed in range(1, 11) for op in make_schedule(seed, 30)
           if op["op"] == "ec2" and op["kind"] in ("throttle", "error")]
    account = [op for op in ops if op.get("scope") == "account"]
    assert account and all(1 <= op["rate"] <= 4 and 2 <= op["burst"] <= 6 for op in account)
    assert any(op["kind"] == "throttle" and "scope" not in op for op in ops)
    assert {op["code"] for op in ops if op["kind"] == "error"} == set(CODES)
