"""How a Kubernetes client finds the store: a kubeconfig file (JSON, which every kubeconfig
reader takes as the YAML it is) and the variables a pod in a cluster is given.

KUBECONFIG is the route clients take first (kubectl, client-go's and the Python client's
default loaders). KUBERNETES_SERVICE_HOST and _PORT are set as a cluster sets them, for
code that reads them; the store speaks plain HTTP without a service account token, so
in-cluster configuration (HTTPS and a token file) is not the route to it."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

CONTEXT = "cnikit"


def write(path: Path, server: str) -> Path:
    """A kubeconfig naming `server` as its one cluster and current context."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT,
                                                   "namespace": "default"}}],
        "current-context": CONTEXT,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1))
    return path


def client_env(path: Path, server: str) -> dict[str, str]:
    """The variables that point a client at the store through the kubeconfig at `path`."""
    url = urlsplit(server)
    return {"KUBECONFIG": str(path), "KUBERNETES_SERVICE_HOST": url.hostname or "",
            "KUBERNETES_SERVICE_PORT": str(url.port or 80)}
