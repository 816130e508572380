"""An API server's resource paths read into what they name:

    /api/v1/{plural}[/{name}[/status]]                          a cluster-scoped kind
    /api/v1/namespaces/{ns}/{plural}[/{name}[/status]]          a namespaced kind
    /apis/{group}/{version}/...                                  the same, in a named group

(`/api/v1/namespaces/{name}` is the namespace object itself.)"""

from __future__ import annotations

from dataclasses import dataclass

from cnikit.kube.kinds import STATUS


@dataclass(frozen=True)
class ResourcePath:
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse(group: str, version: str, tail: str) -> ResourcePath | None:
    """The path after /api/v1/ or /apis/{group}/{version}/; None when it names nothing."""
    parts = [p for p in tail.split("/") if p]
    namespace = None
    if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] != STATUS:
        namespace, parts = parts[1], parts[2:]
    if not parts or len(parts) > 3:
        return None
    return ResourcePath(group, version, parts[0], namespace,
                        parts[1] if len(parts) > 1 else None,
                        parts[2] if len(parts) > 2 else None)
