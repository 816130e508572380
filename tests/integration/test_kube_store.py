"""The cluster's object store in a run: the kit's nodes and pods are in it, a pod's plugins
get kubelet's K8S_POD_* in CNI_ARGS, and a node's daemon reaches the store from inside its
namespace by the usual route (KUBECONFIG) with the Kubernetes Python client: a build of
three parts nobody here wrote (ptp and host-local, a recording plugin chained after them,
an agent that watches its node's pods)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.waiting import wait_for

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")]

CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins

# Chained after ptp: records its CNI_ARGS where its config says, passes the result on.
RECORDER = f"""#!{sys.executable}
import json, os, sys
conf = json.load(sys.stdin)
with open(conf["record"], "a") as f:
    f.write(json.dumps({{"command": os.environ["CNI_COMMAND"],
                        "args": os.environ.get("CNI_ARGS", "")}}) + "\\n")
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps(conf["prevResult"]))
"""

# The node's daemon: watches the pods of its node through the store, as an agent does.
AGENT = f"""#!{sys.executable}
import json, os, sys
from kubernetes import client, config, watch
config.load_kube_config()
node = os.environ["MY_NODE_NAME"]
core = client.CoreV1Api()
for e in watch.Watch().stream(core.list_pod_for_all_namespaces,
                              field_selector="spec.nodeName=" + node):
    meta = e["object"].metadata
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps({{"type": e["type"], "name": meta.name,
                            "ip": e["object"].status.pod_ip,
                            "deleting": meta.deletion_timestamp is not None}}) + "\\n")
"""


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.skipif(not (CNI_PLUGINS / "ptp").exists(),
                    reason="containernetworking-plugins is not installed")
def test_a_runs_pods_are_in_the_store_and_their_plugins_get_kubelets_cni_args(tmp_path):
    from cnikit.cluster import CniCluster

    recorder, agent = tmp_path / "recorder", tmp_path / "agent"
    recorder.write_text(RECORDER)
    agent.write_text(AGENT)
    recorder.chmod(0o755)
    agent.chmod(0o755)
    target = tmp_path / "agent.toml"
    target.write_text(textwrap.dedent(f"""\
        name = "store-agent"
        version = "1.0"

        [daemon]
        command = ["{agent}", "{{state_dir}}/seen"]
        env = {{ MY_NODE_NAME = "{{node}}" }}

        [plugin]
        binaries = ["{CNI_PLUGINS / 'ptp'}", "{CNI_PLUGINS / 'host-local'}", "{recorder}"]
        conflist = {{ cniVersion = "1.0.0", name = "ptp", plugins = [ {{ type = "ptp", ipMasq = false, ipam = {{ type = "host-local", subnet = "{{subnet_cidr}}", dataDir = "{{state_dir}}/ipam" }} }}, {{ type = "recorder", record = "{{state_dir}}/cni_args" }} ] }}
        """))
    with CniCluster(nodes=2, target=str(target), scale=0.05, runtime="process") as c:
        core = client.CoreV1Api(config.new_client_from_config(
            config_file=str(c.state_root / "kubeconfig.local")))
        nodes = {n.metadata.name: n.spec.provider_id for n in core.list_node().items}
        assert nodes == {node.name: f"aws:///{inst.az}/{inst.instance_id}"
                         for node, inst in zip(c.fabric.nodes, c.topo.instances, strict=True)}

        web = c.add_pod(0, "web-1", namespace="shop", annotations={"team": "blue"})
        other = c.add_pod(1, "db-1")
        obj = core.read_namespaced_pod("web-1", "shop")
        assert (obj.spec.node_name, obj.metadata.annotations, obj.status.pod_ip) == (
            web.node.name, {"team": "blue"}, web.ip)

        recorded = lines(c.places[0].state_dir / "cni_args")
        assert [r["command"] for r in recorded] == ["ADD"]
        assert recorded[0]["args"].split(";") == [
            "IgnoreUnknown=1", "K8S_POD_NAMESPACE=shop", "K8S_POD_NAME=web-1",
            f"K8S_POD_UID={obj.metadata.uid}", f"K8S_POD_INFRA_CONTAINER_ID={web.name}"]

        # Each node's agent, inside its namespace, sees its own pods only.
        seen = c.places[0].state_dir / "seen"
        wait_for(lambda: any(e["name"] == "web-1" and e["ip"] == web.ip for e in lines(seen)),
                 timeout=30, what="node 0's agent seeing web-1 with its IP")
        assert {e["name"] for e in lines(seen)} == {"web-1"}
        wait_for(lambda: any(e["ip"] == other.ip for e in lines(c.places[1].state_dir / "seen")),
                 timeout=30, what="node 1's agent seeing db-1")

        c.delete_pod(web)
        assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["db-1"]
        wait_for(lambda: lines(seen)[-1]["type"] == "DELETED", timeout=30,
                 what="the agent seeing web-1 deleted")
        # A graceful delete: marked first, then removed once its sandbox's DEL was done.
        assert [(e["type"], e["deleting"]) for e in lines(seen)][-2:] == [
            ("MODIFIED", True), ("DELETED", True)]
        assert [r["command"] for r in lines(c.places[0].state_dir / "cni_args")] == ["ADD",
                                                                                     "DEL"]
