"""CONTRIBUTING.md's promise, "one file each", kept: into a copy of the packages, one new file
in each registry's folder (an IMDS fault kind, an EC2 fault kind on a new EC2 stage, a
nemesis action, a checker, a cost rule, a scenario, a daemon profile: a built-in target), nothing else
edited; then, run as a user runs the kit, every consumer sees each of them: `fault-imds
add`'s options, both servers' kinds endpoints, the gate's nemesis endpoint, random chaos's
draws, the gate running the new stage, the report's legend, evidence and damage rule,
`cnikit scenarios`, and the matrix's and `run`'s choices.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "fault_imds/faults/cut_tail.py": '''
from faultcore.fault import integer
from fault_imds.faults.base import Answer, ImdsFault, Param
from faultcore.fault import Chaos


class CutTail(ImdsFault):
    """Serve the entry without its last `cut` bytes."""

    kind = "cut-tail"
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
    "cnikit/cloud/faults/fewer_addresses.py": '''
from cnikit.cloud.faults.base import BEFORE, KINDS, Chaos, Ec2Fault, Param, Stage
from faultcore.fault import integer


class ParamsStage(Stage):
    """The call's parameters, rewritten by its faults before it is served."""

    def run(self, faults, call):
        for f in faults:
            f.apply(call)


KINDS.add_stage(ParamsStage("params", hook=BEFORE, order=5,
                            description="the call's parameters, rewritten"))


class FewerAddresses(Ec2Fault):
    kind = "fewer-addresses"
    stage = "params"
    params = {"keep": Param(integer(1, 10), 1, help="addresses assigned at most")}
    description = "an Assign gets at most `keep` of the addresses it asks for"
    chaos = Chaos(rank=6, draw=lambda rng: {"keep": rng.randint(1, 3)})

    def apply(self, call):
        count = "SecondaryPrivateIpAddressCount"
        if call.params is not None and count in call.params:
            call.params[count] = str(min(int(call.params[count]), self.keep))
''',
    "cnikit/check/cost/many_creates.py": '''
from cnikit.check.cost.base import Finding, Rule


class ManyCreates(Rule):
    kind = "many-creates"
    why = "a throwaway rule (#0)"

    def judge(self, calls):
        made = [r for r in calls.records if r["action"] == "CreateNetworkInterface"]
        return [Finding(self.kind, "run", len(made), made[0]["time"], f"{len(made)} creates")
                ] if len(made) > 1 else []
''',
    "cnikit/check/checkers/odd_octet.py": '''
from cnikit.check.checkers.base import Checker


class OddOctet(Checker):
    """A pod whose IP ends in an odd number."""

    kind = "odd-octet"
    colour = "#123456"
    legend = "pod on an odd address"
    excusable = True

    def step(self, e, run):
        if e["process"] == "client" and e["type"] == "ok" and e["f"] == "pod-add":
            ip = e["value"]["ip"]
            if int(ip.rsplit(".", 1)[1]) % 2:
                self._open(e["value"]["pod"], e["time"], ip=ip, what=f"odd address {ip}")
''',
    "cnikit/scenarios/one_pod_each.py": '''
from cnikit.scenarios.engine import scenario


@scenario("one-pod-each", "one pod on each node, nothing else", nodes=2)
def run(ctx):
    ctx.add_pod(0)
    ctx.add_pod(1)
''',
    "cnikit/cluster/actions/freeze.py": '''
from cnikit.cluster.actions.base import Action, node_param
from faultcore.fault import Chaos


class Freeze(Action):
    name = "freeze"
    description = "SIGSTOP the node's daemon"
    why = "a daemon starved of CPU"
    params = {"node": node_param()}
    chaos = Chaos(rank=9)

    @classmethod
    def perform(cls, nemesis, nodes, node):
        return {"node": node}
''',
    "cnikit/daemon/profiles/vpc_cni_throwaway.py": '''
from cnikit.daemon.profiles import Profile
from cnikit.daemon.reconcile import UpstreamReconcile

PROFILE = Profile(name="vpc-cni-throwaway", summary="a profile made by one file",
                  reconcile=UpstreamReconcile(contents=True), order=90)
''',
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
out["cnikit scenarios"] = "one-pod-each" in run(cnikit_cli, "scenarios")
out["matrix choices"] = "vpc-cni-throwaway" in run(cnikit_cli, "matrix", "--help")
out["run choices"] = "vpc-cni-throwaway" in run(cnikit_cli, "run", "--help")

from cnikit.scenarios.random_chaos import make_schedule
drawn = {op.get("kind") for seed in range(1, 120) for op in make_schedule(seed, 60.0)}
out["random-chaos draws"] = sorted({"cut-tail", "fewer-addresses"} & drawn)
acted = {op.get("action") for seed in range(1, 120) for op in make_schedule(seed, 60.0)}
out["random-chaos acts"] = "freeze" in acted

from cnikit.report.legend import legend_rows
out["report legend"] = ("#123456", "pod on an odd address") in legend_rows()
from cnikit.check.damage import excusable
out["damage rule"] = "odd-octet" in excusable()
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
        out["imds kinds"] = "cut" in get(imds.control_url + "/kinds")["cut-tail"]["params"]
        ec2_kinds = get(cloud.endpoint + "/_cnikit/kinds")
        out["gate kinds"] = "keep" in ec2_kinds["fewer-addresses"]["params"]
        from cnikit.check.history import History
        from cnikit.cluster.actions import Served
        from cnikit.cluster.nemesis import Nemesis
        cloud.gate.serve_nemesis(Served(Nemesis(History(), cloud=cloud), 1))
        actions = get(cloud.endpoint + "/_cnikit/nemesis")["actions"]
        out["gate nemesis"] = "node" in actions["freeze"]["params"]
    finally:
        imds.stop()
    import urllib3
    ec2 = cloud.client()
    spec = {"kind": "fewer-addresses", "keep": 1, "target": {"action": "AssignPrivateIpAddresses"}}
    urllib3.PoolManager().request("POST", cloud.endpoint + "/_cnikit/faults",
                                  body=json.dumps(spec).encode(),
                                  headers={"Content-Type": "application/json"})
    got = ec2.assign_private_ip_addresses(NetworkInterfaceId=inst.primary_eni_id,
                                          SecondaryPrivateIpAddressCount=3)
    out["gate runs the new stage"] = len(got["AssignedPrivateIpAddresses"])
finally:
    cloud.stop()
print(json.dumps(out))
'''


def test_one_new_file_per_registry_reaches_every_consumer(tmp_path):
    for name in ("cnikit", "fault_imds", "faultcore"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path, text in FILES.items():
        (tmp_path / path).write_text(text.lstrip())
    p = subprocess.run([sys.executable, "-c", CONSUMERS], cwd=tmp_path, capture_output=True,
                       text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen == {
        "fault-imds add": True, "cnikit scenarios": True, "matrix choices": True,
        "run choices": True, "random-chaos draws": ["cut-tail", "fewer-addresses"],
        "random-chaos acts": True, "report legend": True, "damage rule": True,
        "cost lane": ["many-creates"],
        "imds kinds": True, "gate kinds": True, "gate nemesis": True,
        "gate runs the new stage": 1,
    }, seen
    # The real packages never had any of them.
    from cnikit import scenarios
    from cnikit.check.checkers import CHECKERS
    from cnikit.check.cost import RULES
    from cnikit.daemon import profiles

    assert "odd-octet" not in CHECKERS and "one-pod-each" not in scenarios.names()
    assert "many-creates" not in RULES
    assert "vpc-cni-throwaway" not in profiles.names()
    from cnikit.cluster.actions import ACTIONS
    assert "freeze" not in set(ACTIONS)
