"""Real clients nobody here wrote, against the cluster's object store as against an API
server: the official Kubernetes Python client and kubectl get, list, watch and patch pods,
nodes and a custom resource (a CiliumNode-like kind, declared by its CRD)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest
from kubernetes import client, config, watch

from cnikit.kube import KubeApi, kubeconfig
from tests.waiting import wait_for

GROUP, VERSION, PLURAL = "cilium.io", "v2", "ciliumnodes"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Cluster",
             "names": {"kind": "CiliumNode", "plural": PLURAL, "singular": "ciliumnode",
                       "shortNames": ["cn"]},
             "versions": [{"name": VERSION, "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture
def api(tmp_path):
    with KubeApi() as api:
        api.kubeconfig = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        yield api


@pytest.fixture
def k8s(api):
    """The Python client, configured from the kubeconfig as a build would load it."""
    return config.new_client_from_config(config_file=str(api.kubeconfig))


def seed(api) -> None:
    o = api.objects
    o.create(o.core("nodes"), None, {"metadata": {"name": "node-0"},
                                     "spec": {"providerID": "aws:///us-east-1a/i-0"}})
    o.create(o.core("pods"), "default", {"metadata": {"name": "web-1",
                                                      "annotations": {"a": "1"}},
                                         "spec": {"nodeName": "node-0", "containers": [
                                                  {"name": "app", "image": "app"}]}})


def test_python_client_gets_lists_watches_and_patches_pods_and_nodes(api, k8s):
    seed(api)
    core = client.CoreV1Api(k8s)
    assert core.read_node("node-0").spec.provider_id == "aws:///us-east-1a/i-0"
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-0")
    assert [p.metadata.name for p in pods.items] == ["web-1"]
    since = pods.metadata.resource_version
    core.patch_namespaced_pod("web-1", "default", {"metadata": {"annotations": {"b": "2"}}})
    core.patch_node("node-0", [{"op": "add", "path": "/metadata/labels",
                                "value": {"zone": "a"}}])
    assert core.read_namespaced_pod("web-1", "default").metadata.annotations == {"a": "1",
                                                                                 "b": "2"}
    assert core.read_node("node-0").metadata.labels == {"zone": "a"}
    seen = [(e["type"], e["object"].metadata.annotations)
            for e in watch.Watch().stream(core.list_namespaced_pod, "default",
                                          resource_version=since, timeout_seconds=1)]
    assert seen == [("MODIFIED", {"a": "1", "b": "2"})]


def test_python_client_declares_a_custom_kind_and_uses_it(api, k8s):
    client.ApiextensionsV1Api(k8s).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(k8s)
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "CiliumNode",
        "metadata": {"name": "node-0"}, "spec": {"ipam": {"pool": {}}}})
    custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, "node-0",
                                       {"spec": {"ipam": {"pool": {"10.0.1.5": {}}}}})
    got = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "node-0")
    assert got["spec"]["ipam"]["pool"] == {"10.0.1.5": {}}
    listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["node-0"]
    events = watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                  timeout_seconds=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "node-0")]


@pytest.fixture
def kubectl(api, tmp_path):
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed (make setup installs Debian's kubernetes-client)")
    env = {"KUBECONFIG": str(api.kubeconfig), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def run(*args: str, stdin: str | None = None) -> str:
        r = subprocess.run([binary, *args], env=env, input=stdin, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr.strip()}"
        return r.stdout

    run.popen = lambda *args: subprocess.Popen([binary, *args], env=env, text=True,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return run


def test_kubectl_gets_lists_and_patches_pods_nodes_and_a_custom_resource(api, kubectl):
    seed(api)
    assert kubectl("get", "nodes", "-o", "name").split() == ["node/node-0"]
    assert kubectl("get", "pods", "-A", "-o", "name").split() == ["pod/web-1"]
    kubectl("patch", "pod", "web-1", "-p", '{"metadata":{"annotations":{"b":"2"}}}')
    kubectl("patch", "node", "node-0", "--type=merge", "-p",
            '{"spec":{"podCIDR":"10.0.8.0/24"}}')
    assert kubectl("get", "pod", "web-1", "-o", "jsonpath={.metadata.annotations.b}") == "2"
    assert kubectl("get", "node", "node-0", "-o", "jsonpath={.spec.podCIDR}") == "10.0.8.0/24"
    # No OpenAPI document is served: kubectl's client-side validation is turned off.
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(CRD))
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "CiliumNode",
        "metadata": {"name": "node-0"}, "spec": {"ipam": {}}}))
    kubectl("patch", "cn", "node-0", "--type=json", "-p",
            '[{"op":"add","path":"/spec/ipam/pool","value":{"10.0.1.5":{}}}]')
    assert kubectl("get", "ciliumnodes", "-o", "jsonpath={.items[0].spec.ipam.pool}") == (
        '{"10.0.1.5":{}}')


def test_kubectl_watches_pods(api, kubectl):
    seed(api)
    proc = kubectl.popen("get", "pods", "--watch", "-o", "name")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: lines, timeout=30, what="kubectl's first line")
        api.objects.create(api.objects.core("pods"), "default", {"metadata": {"name": "web-2"}})
        wait_for(lambda: len(lines) >= 2, timeout=30, what="the new pod in kubectl's watch")
    finally:
        proc.kill()
        proc.communicate()
    assert [line.strip() for line in lines] == ["pod/web-1", "pod/web-2"]
