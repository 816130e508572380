"""CONTRIBUTING.md's promise, "one file each", kept: into a copy of the packages, one new file
in each registry's folder (an IMDS fault kind, an EC2 fault kind on a new EC2 stage, a
nemesis action, a checker, a cost rule, a scenario, a daemon profile: a built-in target, an
EC2 action the gate answers), nothing else edited; then, run as a user runs the kit, every
consumer sees each of them: `fault-imds add`'s options, both servers' kinds endpoints, the
gate's nemesis endpoint, random chaos's draws, the gate running the new stage and answering
the new action, the report's legend, evidence and damage rule, `cnikit scenarios`, and the
matrix's and `run`'s choices. Then a second file taking each one's name is refused, naming
both files. Every name carries a random part (NAME), so no item of the kit can take it.

The consumers are tested one by one, with throwaway kinds made in fixtures, in
test_fault_registry_consumers.py, test_checker_registry.py and
tests/scenarios/test_registration.py; this test is the whole promise at once, as files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "fault_imds/faults/cut_tail_NAME.py": '''
from faultcore.fault import integer
from fault_imds.faults.base import Answer, ImdsFault, Param
from faultcore.fault import Chaos


class CutTail(ImdsFault):
    """Serve the entry without its last `cut` bytes."""

    kind = "cut-tail-NAME"
    stage = "request"
    order = 36
    uses_probability = True
    targets = ("instance_id", "mac", "eni_id", "path")
    params = {"cut": Param(integer(0, 4096), help="bytes left out at the end")}
    description = "serve the entry without its last `cut` bytes"
    chaos = Chaos(rank=9, draw=lambda rng: {"cut": rng.randint(1, 8)})

    async def apply(self, req):
        body = req.served()
        return None if body is None else Answer(200, body=body[:max(0, len(body) - self.cut)])
''',
    "cnikit/cloud/faults/fewer_addresses_NAME.py": '''
from cnikit.cloud.faults.base import BEFORE, KINDS, Chaos, Ec2Fault, Param, Stage
from faultcore.fault import integer


class ParamsStage(Stage):
    """The call's parameters, rewritten by its faults before it is served."""

    def run(self, faults, call):
        for f in faults:
            f.apply(call)


KINDS.add_stage(ParamsStage("params-NAME", hook=BEFORE, order=5,
                            description="the call's parameters, rewritten"))


class FewerAddresses(Ec2Fault):
    kind = "fewer-addresses-NAME"
    stage = "params-NAME"
    params = {"keep": Param(integer(1, 10), 1, help="addresses assigned at most")}
    description = "an Assign gets at most `keep` of the addresses it asks for"
    chaos = Chaos(rank=6, draw=lambda rng: {"keep": rng.randint(1, 3)})

    def apply(self, call):
        count = "SecondaryPrivateIpAddressCount"
        if call.params is not None and count in call.params:
            call.params[count] = str(min(int(call.params[count]), self.keep))
''',
    "cnikit/check/cost/many_creates_NAME.py": '''
from cnikit.check.cost.base import Finding, Rule


class ManyCreates(Rule):
    kind = "many-creates-NAME"
    why = "a throwaway rule (#0)"

    def judge(self, calls):
        made = [r for r in calls.records if r["action"] == "CreateNetworkInterface"]
        return [Finding(self.kind, "run", len(made), made[0]["time"], f"{len(made)} creates")
                ] if len(made) > 1 else []
''',
    "cnikit/check/checkers/odd_octet_NAME.py": '''
from cnikit.check.checkers.base import Checker


class OddOctet(Checker):
    """A pod whose IP ends in an odd number."""

    kind = "odd-octet-NAME"
    colour = "#123456"
    legend = "pod on an odd address"
    excusable = True

    def step(self, e, run):
        if e["process"] == "client" and e["type"] == "ok" and e["f"] == "pod-add":
            ip = e["value"]["ip"]
            if int(ip.rsplit(".", 1)[1]) % 2:
                self._open(e["value"]["pod"], e["time"], ip=ip, what=f"odd address {ip}")
''',
    "cnikit/scenarios/one_pod_each_NAME.py": '''
from cnikit.scenarios.engine import scenario


@scenario("one-pod-each-NAME", "one pod on each node, nothing else", nodes=2)
def run(ctx):
    ctx.add_pod(0)
    ctx.add_pod(1)
''',
    "cnikit/cluster/actions/freeze_NAME.py": '''
from cnikit.cluster.actions.base import Action, node_param
from faultcore.fault import Chaos


class Freeze(Action):
    name = "freeze-NAME"
    description = "SIGSTOP the node's daemon"
    why = "a daemon starved of CPU"
    params = {"node": node_param()}
    chaos = Chaos(rank=9)

    @classmethod
    def perform(cls, nemesis, nodes, node):
        return {"node": node}
''',
    "cnikit/daemon/profiles/vpc_cni_throwaway_NAME.py": '''
from cnikit.daemon.profiles import Profile
from cnikit.daemon.reconcile import UpstreamReconcile

PROFILE = Profile(name="vpc-cni-throwaway-NAME", summary="a profile made by one file",
                  reconcile=UpstreamReconcile(contents=True), order=90)
''',
    "cnikit/cloud/gate/throwaway_NAME.py": '''
from cnikit.cloud import responses as R
from cnikit.cloud.gate.actions import ActionGroup, action


class Throwaway(ActionGroup):
    @action("UNMODELLED")
    async def _answer(self, r, params, headers):
        return 200, R.action_xml("UNMODELLED", "<servedBy>NAME</servedBy>")
''',
}

# A second file for each: the name taken again, what loads it, and what the refusal calls it.
DUPLICATES = {
    "fault_imds/faults/cut_tail_NAME_again.py": (
        "import fault_imds.faults", "fault kind 'cut-tail-NAME'", "fault_imds/faults/cut_tail_NAME.py",
        '''
from fault_imds.faults.base import ImdsFault


class CutTailAgain(ImdsFault):
    kind = "cut-tail-NAME"
    stage = "request"
'''),
    "cnikit/cloud/faults/params_NAME_again.py": (
        "import cnikit.cloud.faults", "'params-NAME'", "cnikit/cloud/faults/fewer_addresses_NAME.py",
        '''
from cnikit.cloud.faults.base import BEFORE, KINDS, Stage
from cnikit.cloud.faults import fewer_addresses_NAME  # noqa: F401 - registered first


class OtherParamsStage(Stage):
    def run(self, faults, call):
        pass


KINDS.add_stage(OtherParamsStage("params-NAME", hook=BEFORE))
'''),
    "cnikit/check/cost/many_creates_NAME_again.py": (
        "import cnikit.check.cost", "cost rule 'many-creates-NAME'",
        "cnikit/check/cost/many_creates_NAME.py", '''
from cnikit.check.cost.base import Rule


class ManyCreatesAgain(Rule):
    kind = "many-creates-NAME"
'''),
    "cnikit/check/checkers/odd_octet_NAME_again.py": (
        "import cnikit.check.checkers", "checker 'odd-octet-NAME'",
        "cnikit/check/checkers/odd_octet_NAME.py", '''
from cnikit.check.checkers.base import Checker


class OddOctetAgain(Checker):
    kind = "odd-octet-NAME"
'''),
    "cnikit/scenarios/one_pod_each_NAME_again.py": (
        "CLI scenarios", "scenario 'one-pod-each-NAME'", "cnikit/scenarios/one_pod_each_NAME.py",
        '''
from cnikit.scenarios.engine import scenario


@scenario("one-pod-each-NAME", "the same name again")
def run(ctx):
    pass
'''),
    "cnikit/cluster/actions/freeze_NAME_again.py": (
        "import cnikit.cluster.actions", "nemesis action 'freeze-NAME'",
        "cnikit/cluster/actions/freeze_NAME.py", '''
from cnikit.cluster.actions.base import Action


class FreezeAgain(Action):
    name = "freeze-NAME"
'''),
    "cnikit/daemon/profiles/vpc_cni_throwaway_NAME_again.py": (
        "from cnikit.daemon import profiles; profiles.registry()",
        "daemon profile 'vpc-cni-throwaway-NAME'",
        "cnikit/daemon/profiles/vpc_cni_throwaway_NAME.py", '''
from cnikit.daemon.profiles import Profile
from cnikit.daemon.reconcile import UpstreamReconcile

PROFILE = Profile(name="vpc-cni-throwaway-NAME", summary="again",
                  reconcile=UpstreamReconcile(contents=True))
'''),
    "cnikit/cloud/gate/throwaway_NAME_again.py": (
        "from cnikit.cloud.gate.actions import discover; discover()",
        "modelled EC2 action 'UNMODELLED'", "cnikit/cloud/gate/throwaway_NAME.py", '''
from cnikit.cloud.gate.actions import ActionGroup, action


class ThrowawayAgain(ActionGroup):
    @action("UNMODELLED")
    async def _answer(self, r, params, headers):
        return 200, b""
'''),
}

# Run in the copy, as a user runs the kit: its own CLIs, a real gate over moto, a real IMDS.
CONSUMERS = r'''
import json, urllib.request
from click.testing import CliRunner

out = {}
from fault_imds.cli import cli as fault_imds_cli
from cnikit.cli import cli as cnikit_cli

run = lambda cli, *args: CliRunner().invoke(cli, list(args)).output
out["fault-imds add"] = "--cut" in run(fault_imds_cli, "add", "--help")
out["cnikit scenarios"] = "one-pod-each-NAME" in run(cnikit_cli, "scenarios")
out["matrix choices"] = "vpc-cni-throwaway-NAME" in run(cnikit_cli, "matrix", "--help")
out["run choices"] = "vpc-cni-throwaway-NAME" in run(cnikit_cli, "run", "--help")

from cnikit.scenarios.random_chaos import make_schedule
drawn = {op.get("kind") for seed in range(1, 120) for op in make_schedule(seed, 60.0)}
out["random-chaos draws"] = sorted({"cut-tail-NAME", "fewer-addresses-NAME"} & drawn)
acted = {op.get("action") for seed in range(1, 120) for op in make_schedule(seed, 60.0)}
out["random-chaos acts"] = "freeze-NAME" in acted

from cnikit.report.legend import legend_rows
out["report legend"] = ("#123456", "pod on an odd address") in legend_rows()
from cnikit.check.damage import excusable
out["damage rule"] = "odd-octet-NAME" in excusable()
from cnikit.check import cost
create = {"time": 1.0, "action": "CreateNetworkInterface", "principal": "testing", "outcome": "ok"}
out["cost lane"] = [f["kind"] for f in cost.judge([create, create], [])]

from cnikit.cloud import Cloud
from fault_imds.server import ImdsServer
cloud = Cloud.start(ec2="moto")
try:
    inst = cloud.bootstrap(nodes=1).instances[0]
    imds = ImdsServer(ec2_endpoint=cloud.endpoint, instance_id=inst.instance_id).start()
    try:
        get = lambda url: json.loads(urllib.request.urlopen(url, timeout=10).read())
        out["imds kinds"] = "cut" in get(imds.control_url + "/kinds")["cut-tail-NAME"]["params"]
        ec2_kinds = get(cloud.endpoint + "/_cnikit/kinds")
        out["gate kinds"] = "keep" in ec2_kinds["fewer-addresses-NAME"]["params"]
        from cnikit.check.history import History
        from cnikit.cluster.actions import Served
        from cnikit.cluster.nemesis import Nemesis
        cloud.gate.serve_nemesis(Served(Nemesis(History(), cloud=cloud), 1))
        actions = get(cloud.endpoint + "/_cnikit/nemesis")["actions"]
        out["gate nemesis"] = "node" in actions["freeze-NAME"]["params"]
    finally:
        imds.stop()
    import urllib3
    ec2 = cloud.client()
    spec = {"kind": "fewer-addresses-NAME", "keep": 1, "target": {"action": "AssignPrivateIpAddresses"}}
    urllib3.PoolManager().request("POST", cloud.endpoint + "/_cnikit/faults",
                                  body=json.dumps(spec).encode(),
                                  headers={"Content-Type": "application/json"})
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                          SecondaryPrivateIpAddressCount=3)
    out["gate runs the new stage"] = len(got["AssignedPrivateIpAddresses"])
    answer = urllib3.PoolManager().request(
        "POST", cloud.endpoint + "/", body="Action=UNMODELLED&Version=2016-11-15",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    out["gate answers the new action"] = b"<servedBy>NAME</servedBy>" in answer.data
finally:
    cloud.stop()
print(json.dumps(out))
'''


def unmodelled_action() -> str:
    """A real EC2 action the gate forwards (it answers every action EC2 has, and models
    none of these today)."""
    from cnikit.cloud.gate.actions import handlers
    from cnikit.cloud.gate.backend import Backend

    modelled = set(handlers(Backend("http://127.0.0.1:9")))
    return next(a for a in ("DescribeAddresses", "DescribeKeyPairs", "DescribeRegions",
                            "DescribeAvailabilityZones", "DescribeSecurityGroups")
                if a not in modelled)


def test_one_new_file_per_registry_reaches_every_consumer(tmp_path):
    name, action = uuid.uuid4().hex[:8], unmodelled_action()

    def named(text: str) -> str:
        return text.replace("NAME", name).replace("UNMODELLED", action)

    for pkg in ("cnikit", "fault_imds", "faultcore"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path, text in FILES.items():
        (tmp_path / named(path)).write_text(named(text).lstrip())
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", named(CONSUMERS)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen == {
        "fault-imds add": True, "cnikit scenarios": True, "matrix choices": True,
        "run choices": True,
        "random-chaos draws": sorted([f"cut-tail-{name}", f"fewer-addresses-{name}"]),
        "random-chaos acts": True, "report legend": True, "damage rule": True,
        "cost lane": [f"many-creates-{name}"],
        "imds kinds": True, "gate kinds": True, "gate nemesis": True,
        "gate runs the new stage": 1, "gate answers the new action": True,
    }, seen

    for path, (load, what, first, text) in DUPLICATES.items():
        again = tmp_path / named(path)
        again.write_text(named(text).lstrip())
        try:
            cmd = [sys.executable, "-m", "cnikit.cli", "scenarios"] if load == "CLI scenarios" \
                else [sys.executable, "-c", load]
            p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                               env=env)
        finally:
            again.unlink()
        said = f"{named(what)} is defined twice: in {named(first)} and in {named(path)}"
        assert p.returncode != 0 and said in p.stderr, (path, p.stderr[-2000:])
        if load == "CLI scenarios":  # a user's command: one line and exit 2, no traceback
            assert (p.returncode, p.stderr.count("\n")) == (2, 1), p.stderr[-2000:]
