"""The run's nodes and pods in the cluster's object store (cnikit.kube), written as a node's
registration and its kubelet write them: a Node per instance (providerID
aws:///<az>/<instance-id>), a Pod scheduled to its node before its sandbox is made (name,
namespace, UID, annotations), its IP once the CNI ADD answered, and on deletion first a
deletionTimestamp, then, once the sandbox's DEL is done, removal. The CNI_ARGS a pod's
plugins get name it as kubelet names it."""

from __future__ import annotations

import contextlib

from cnikit.errors import CnikitError
from cnikit.kube import ApiError, Objects


class KubeObjects:
    def __init__(self, objects: Objects):
        self.objects = objects
        self.pods = objects.core("pods")
        self.nodes = objects.core("nodes")
        self._by_sandbox: dict[str, tuple[str, str]] = {}  # sandbox -> (namespace, name)

    def register_nodes(self, fabric) -> None:
        """A Node for each of the fabric's nodes (its name is the node's namespace, as the
        kit's containers' MY_NODE_NAME says)."""
        for node, inst in zip(fabric.nodes, fabric.topo.instances, strict=True):
            self.objects.create(self.nodes, None, {
                "metadata": {"name": node.name, "labels": {
                    "kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                    "topology.kubernetes.io/zone": inst.az,
                    "node.kubernetes.io/instance-type": inst.instance_type}},
                "spec": {"providerID": f"aws:///{inst.az}/{inst.instance_id}"},
                "status": {"addresses": [{"type": "InternalIP", "address": inst.primary_ip}],
                           "conditions": [{"type": "Ready", "status": "True"}]}})

    def scheduled(self, node: str, namespace: str, name: str,
                  annotations: dict[str, str] | None = None) -> dict:
        """The pod object, as the scheduler leaves it: bound to `node`, not yet running."""
        try:
            return self.objects.create(self.pods, namespace, {
                "metadata": {"name": name, "namespace": namespace,
                             "annotations": dict(annotations or {})},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
                "status": {"phase": "Pending"}})
        except ApiError as e:
            raise CnikitError(f"pod {namespace}/{name}: {e.message}") from None

    @staticmethod
    def cni_args(pod: dict) -> dict[str, str]:
        """CNI_ARGS as kubelet's runtime sends them (IgnoreUnknown first, as plugins require;
        the fabric adds K8S_POD_INFRA_CONTAINER_ID, the sandbox's id)."""
        meta = pod["metadata"]
        return {"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": meta["namespace"],
                "K8S_POD_NAME": meta["name"], "K8S_POD_UID": meta["uid"]}

    def running(self, pod: dict, sandbox: str, ip: str) -> None:
        meta = pod["metadata"]
        self._by_sandbox[sandbox] = (meta["namespace"], meta["name"])
        self.objects.patch(self.pods, meta["namespace"], meta["name"],
                           "application/merge-patch+json",
                           {"status": {"phase": "Running", "podIP": ip,
                                       "podIPs": [{"ip": ip}]}})

    def failed(self, pod: dict) -> None:
        """The sandbox was never made: the object goes (an ADD retried makes a new one)."""
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):  # a client of the store deleted it already
            self.objects.delete(self.pods, meta["namespace"], meta["name"])

    def deleting(self, sandbox: str) -> None:
        """The graceful delete's mark, before the sandbox's DEL."""
        where = self._by_sandbox.get(sandbox)
        if where is not None:
            with contextlib.suppress(ApiError):
                self.objects.mark_deleting(self.pods, *where)

    def deleted(self, sandbox: str) -> None:
        where = self._by_sandbox.pop(sandbox, None)
        if where is not None:
            with contextlib.suppress(ApiError):
                self.objects.delete(self.pods, *where)
