"""What clients read before they ask for objects: /version, /api, /api/v1, /apis,
/apis/{group} and /apis/{group}/{version}, shaped as an API server answers them (kubectl
and client-go find the kinds here; the Python client only needs the paths)."""

from __future__ import annotations

from cnikit.kube.kinds import Kind, Kinds

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0+cnikit", "gitCommit": "",
           "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "",
           "compiler": "gc", "platform": "linux/amd64"}


def api_versions() -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def resources(kinds: Kinds, group: str, version: str) -> dict | None:
    """The APIResourceList of one group version; None when nothing is served there."""
    served = [k for k in kinds.all() if k.group == group and k.version == version]
    if not served:
        return None
    listed = []
    for k in sorted(served, key=lambda k: k.plural):
        listed += [k.resource(), k.status_resource()]
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": Kind(group, version, "", "", False).api_version,
            "resources": listed}


def _group(name: str, versions: list[str]) -> dict:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries,
            "preferredVersion": entries[0]}


def api_groups(kinds: Kinds) -> dict:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, v) for g, v in sorted(kinds.groups().items())]}


def api_group(kinds: Kinds, name: str) -> dict | None:
    versions = kinds.groups().get(name)
    return _group(name, versions) if versions else None
