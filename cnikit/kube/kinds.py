"""The kinds the store serves: the built-in ones a CNI build reads (pods, nodes, namespaces,
CustomResourceDefinitions) and every custom one registered on the fly, by a
CustomResourceDefinition object or by the first object created under a group, version and
plural nobody declared (an operator that never ships its CRDs still runs)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

CRD_GROUP = "apiextensions.k8s.io"
STATUS = "status"  # the one subresource served: the object itself, as controllers write it


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group (/api/v1)
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = field(default=())

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """What a kind is stored under: one version per group and plural."""
        return (self.group, self.plural)

    def resource(self) -> dict:
        """The kind as discovery's APIResourceList lists it."""
        return {"name": self.plural, "singularName": self.kind.lower(),
                "namespaced": self.namespaced, "kind": self.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch",
                          "update", "watch"], "shortNames": list(self.short_names)}

    def status_resource(self) -> dict:
        return {"name": f"{self.plural}/{STATUS}", "singularName": "",
                "namespaced": self.namespaced, "kind": self.kind,
                "verbs": ["get", "patch", "update"]}


BUILTIN = (
    Kind("", "v1", "Pod", "pods", True, ("po",)),
    Kind("", "v1", "Node", "nodes", False, ("no",)),
    Kind("", "v1", "Namespace", "namespaces", False, ("ns",)),
    Kind(CRD_GROUP, "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
         ("crd", "crds")),
)


class Kinds:
    """Every kind served, by (group, plural); thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str], Kind] = {k.key: k for k in BUILTIN}

    def find(self, group: str, version: str, plural: str) -> Kind | None:
        with self._lock:
            kind = self._kinds.get((group, plural))
        return kind if kind is not None and kind.version == version else None

    def add(self, kind: Kind) -> Kind:
        """Register `kind` (a kind already served under its group and plural is kept)."""
        with self._lock:
            return self._kinds.setdefault(kind.key, kind)

    def add_crd(self, crd: dict) -> Kind | None:
        """Register what a CustomResourceDefinition object declares (its first served
        version); None when it declares too little to serve."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions = [v.get("name") for v in spec.get("versions") or [] if v.get("served", True)]
        version = versions[0] if versions else spec.get("version")
        if not (spec.get("group") and version and names.get("plural") and names.get("kind")):
            return None
        return self.add(Kind(spec["group"], version, names["kind"], names["plural"],
                             spec.get("scope", "Namespaced") == "Namespaced",
                             tuple(names.get("shortNames") or ())))

    def all(self) -> list[Kind]:
        with self._lock:
            return list(self._kinds.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> its versions, the named groups only (the core group is /api)."""
        out: dict[str, list[str]] = {}
        for k in self.all():
            if k.group and k.version not in out.setdefault(k.group, []):
                out[k.group].append(k.version)
        return out
