"""The cluster's object store: a Kubernetes-shaped API of nodes, pods and custom resources
that every node's daemon and every cluster component of a run reaches, so a build that
uses a Kubernetes client can point at it (docs/architecture.md, "cnikit.kube").

    kinds.py       the kinds served: built-ins and custom ones registered on the fly
    objects.py     the objects: resourceVersions, conflicts, finalizers, watch history
    patch.py       merge, JSON and strategic merge patches
    selectors.py   label and field selectors
    paths.py       an API server's REST paths read into kind, namespace and name
    discovery.py   /version, /api, /apis and the resource lists clients discover kinds by
    server.py      the HTTP front in a background thread (KubeApi)
    kubeconfig.py  the kubeconfig file and variables that point a client at it
"""

from cnikit.kube.objects import ApiError, Objects
from cnikit.kube.server import KubeApi

__all__ = ["ApiError", "KubeApi", "Objects"]
