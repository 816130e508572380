"""A target's cluster-wide component on a live VPC: started once per run in the run's VPC
namespace, reaching EC2 with the kit's environment, killed (its process group with it) and
restarted by the nemesis by name, stopped with the run, and found by cleanup after a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cnikit.certify import template
from tests.integration.conftest import crash, needs_root
from tests.waiting import wait_for

pytestmark = [pytest.mark.root, needs_root]

# An operator stand-in: counts its starts, forks a helper into its group, asks EC2 for the
# run's instances with what its environment gives, and answers its readiness URL.
OPERATOR = f"""\
    #!{sys.executable}
    import http.server, json, os, subprocess, sys
    import boto3
    state = sys.argv[sys.argv.index("--state") + 1]
    with open(os.path.join(state, "starts"), "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    helper = subprocess.Popen(["sleep", "600"])
    ec2 = boto3.client("ec2", endpoint_url=sys.argv[sys.argv.index("--ec2") + 1],
                       region_name=os.environ["AWS_REGION"])
    ids = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"]
           for i in r["Instances"]]
    seen = {{"instances": ids, "helper": helper.pid, "resync": os.environ["RESYNC"],
            "imds": os.environ["AWS_EC2_METADATA_SERVICE_ENDPOINT"]}}
    with open(os.path.join(state, "seen.tmp"), "w") as f:
        json.dump(seen, f)
    os.rename(os.path.join(state, "seen.tmp"), os.path.join(state, "seen.json"))

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", 9234), Health).serve_forever()
    """

COMPONENT = """
    [[component]]
    name = "operator"
    command = ["./operator", "--ec2", "{ec2_endpoint}", "--state", "{state_dir}"]
    env = { RESYNC = "30" }
    ready = { url = "http://127.0.0.1:9234/healthz", timeout = 30 }
    """


def operator_target(tmp_path: Path) -> Path:
    script = tmp_path / "operator"
    script.write_text(textwrap.dedent(OPERATOR))
    script.chmod(0o755)
    path = template.write(tmp_path / "operator-design.toml", profile="hardened")
    path.write_text(path.read_text() + textwrap.dedent(COMPONENT))
    return path


def running(pid: int) -> bool:
    from cnikit import runtime

    return runtime.process_start_time(pid) is not None and not runtime.is_zombie(pid)


def seen(proc) -> dict:
    return json.loads((proc.state_dir / "seen.json").read_text())


def test_a_component_runs_once_is_killed_and_restarted_by_name_and_goes_with_the_run(tmp_path):
    from cnikit.cluster import CniCluster
    from cnikit.fabric import cleanup

    with CniCluster(nodes=2, target=operator_target(tmp_path)) as c:
        op = c.components["operator"]
        assert list(c.components) == ["operator"] and op.alive()
        assert (op.state_dir / "starts").read_text().split() == [str(op.pid)], "once per run"
        vpc_ns = os.stat(c.fabric.vpc.path).st_ino
        assert os.stat(f"/proc/{op.pid}/ns/net").st_ino == vpc_ns
        first = wait_for(lambda: (op.state_dir / "seen.json").exists() and seen(op), 10,
                         "the operator's EC2 answer")
        assert {c.instance_id(0), c.instance_id(1)} <= set(first["instances"])
        assert first["resync"] == "30" and first["imds"] == c.fabric.imds_endpoint
        recorded = [pid for pid, _ in cleanup._recorded(c.fabric.run.dir)]
        assert op.pid in recorded, "recorded for cleanup"

        killed = op.pid
        c.act("kill-component", component="operator")
        assert not op.alive()
        wait_for(lambda: not running(first["helper"]), 10, "its helper killed with its group")
        assert [v["op"] for v in c.nemesis.in_effect()] == ["component-kill"]

        c.act("restart-component", component="operator", wait=30)
        assert op.alive() and op.pid != killed and c.nemesis.in_effect() == []
        assert len((op.state_dir / "starts").read_text().split()) == 2
        ops = [(e["type"], e["f"]) for e in c.history.entries() if e["process"] == "nemesis"]
        assert ops == [("start", "component-kill"), ("end", "component-kill")]
        second = wait_for(lambda: seen(op)["helper"] != first["helper"] and seen(op), 10,
                          "the restarted operator's EC2 answer")
        with pytest.raises(ValueError, match="no component 'agent'.*operator"):
            c.act("kill-component", component="agent")
        last = op.pid
    assert not running(last) and not running(second["helper"]), "stopped with the run"


HOLD = """
import json, sys
from cnikit.cluster import CniCluster
c = CniCluster(nodes=1, target=sys.argv[1]).start()
op = c.components["operator"]
print(json.dumps({"run_id": c.fabric.rid, "pid": op.pid}), flush=True)
sys.stdin.read()
"""


@pytest.mark.exclusive
def test_cleanup_finds_a_crashed_runs_component_and_what_it_forked(tmp_path):
    from cnikit.fabric import netns
    from cnikit.fabric.cleanup import remove_dead_runs

    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(operator_target(tmp_path))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    line = proc.stdout.readline()
    assert line, "the run did not start"
    run = json.loads(line)
    state = wait_for(lambda: next(Path("/dev/shm").glob(
        f"cnikit-{run['run_id']}/component-operator/seen.json"), None), 30, "the operator")
    helper = json.loads(state.read_text())["helper"]
    crash(proc)
    assert running(run["pid"]) and running(helper), "a crash leaves the component behind"
    report = remove_dead_runs(only={run["run_id"]})
    assert not running(run["pid"]) and not running(helper)
    assert {run["pid"], helper} <= set(report.processes)
    assert netns.names(f"ck-{run['run_id']}-") == []
