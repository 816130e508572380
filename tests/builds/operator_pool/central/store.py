"""A small client of the cluster's object store (a Kubernetes API server's REST paths), found
through KUBECONFIG as any Kubernetes client finds it. Standard library only: the fixture runs
on the machine's own Python."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

# One per node, named after the node (cluster-scoped), as Cilium keeps a CiliumNode.
GROUP, VERSION, KIND, PLURAL = "fixture.cnikit.dev", "v1", "OperatorNode", "operatornodes"
TIMEOUT = 5.0
# No proxy: the store is reached inside the run's network namespaces.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StoreError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def server() -> str:
    """The API server the kubeconfig's current context names (a kubeconfig in JSON)."""
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    with open(path) as f:
        config = json.load(f)
    current = next(c["context"] for c in config["contexts"]
                   if c["name"] == config["current-context"])
    return next(c["cluster"]["server"] for c in config["clusters"]
                if c["name"] == current["cluster"]).rstrip("/")


class Store:
    def __init__(self, base: str | None = None):
        self.base = base or server()

    def _call(self, method: str, path: str, body: dict | None = None,
              content_type: str = "application/json") -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": content_type})
        try:
            with OPENER.open(req, timeout=TIMEOUT) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", "")
            except ValueError:
                message = ""
            raise StoreError(e.code, message) from None
        except (OSError, ValueError) as e:
            raise StoreError(0, str(e)) from None

    def nodes(self) -> list[dict]:
        return self._call("GET", "/api/v1/nodes")["items"]

    def _resource(self, name: str = "") -> str:
        return f"/apis/{GROUP}/{VERSION}/{PLURAL}" + (f"/{name}" if name else "")

    def resources(self) -> dict[str, dict]:
        """Every OperatorNode by name (none yet: an empty dict)."""
        try:
            items = self._call("GET", self._resource())["items"]
        except StoreError as e:
            if e.status == 404:  # the kind is registered by its first object
                return {}
            raise
        return {o["metadata"]["name"]: o for o in items}

    def resource(self, name: str) -> dict | None:
        try:
            return self._call("GET", self._resource(name))
        except StoreError as e:
            if e.status == 404:
                return None
            raise

    def create(self, name: str, spec: dict) -> dict:
        return self._call("POST", self._resource(), {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
            "spec": spec, "status": {"used": [], "release": {}}})

    def patch(self, name: str, body: dict) -> dict:
        """A JSON merge patch: a key set to None is removed, so operator and agent each
        write their own keys of the release map without overwriting the other's."""
        return self._call("PATCH", self._resource(name), body, "application/merge-patch+json")
