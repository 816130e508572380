"""The three patch types an API server takes: JSON merge patch (RFC 7386), JSON patch
(RFC 6902) and strategic merge patch for the common cases (lists of objects merged by
their key, as Kubernetes' Go types declare it for the fields a CNI build touches; the
`$patch` and `$deleteFromPrimitiveList` directives; `$setElementOrder` and `$retainKeys`
are accepted and ignored). A patch that cannot apply raises PatchError, one line."""

from __future__ import annotations

import copy

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
TYPES = (MERGE, JSON_PATCH, STRATEGIC)

# Fields whose list items merge by a key under strategic merge (k8s.io/api's patchMergeKey).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "env": "name", "volumes": "name", "volumeMounts": "mountPath",
              "ports": "containerPort", "conditions": "type", "addresses": "type",
              "ownerReferences": "uid", "podIPs": "ip", "hostIPs": "ip", "taints": "key",
              "containerStatuses": "name", "imagePullSecrets": "name"}
# Lists of plain values that strategic merge unions instead of replacing.
MERGED_VALUES = {"finalizers"}


class PatchError(ValueError):
    """A patch that does not apply (its reason in one line)."""


def apply(content_type: str, doc: dict, patch) -> dict:
    """`doc` patched (a new object; `doc` is left as it was)."""
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise PatchError("a JSON patch is a list of operations")
        return json_patch(doc, patch)
    if not isinstance(patch, dict):
        raise PatchError("a merge patch is a JSON object")
    if content_type == MERGE:
        return merge_patch(doc, patch)
    return strategic_merge(doc, patch)


def merge_patch(doc, patch):
    """RFC 7386: objects merge, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(doc, patch, field: str = ""):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$retainKeys", "$patch"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            out[name] = [x for x in out.get(name) or [] if x not in v]
        elif v is None:
            out.pop(k, None)
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v)
        else:
            out[k] = strategic_merge(out.get(k), v, k)
    return out


def _merge_list(name: str, current, items: list) -> list:
    current = current if isinstance(current, list) else []
    if name in MERGED_VALUES:
        return current + [x for x in items if x not in current]
    key = MERGE_KEYS.get(name)
    if key is None or not all(isinstance(x, dict) for x in items):
        return copy.deepcopy(items)
    merged = [dict(x) for x in current]
    for item in items:
        at = next((i for i, x in enumerate(merged) if x.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                merged.pop(at)
        elif at is None:
            merged.append(strategic_merge({}, item))
        else:
            merged[at] = strategic_merge(merged[at], item)
    return merged


def json_patch(doc: dict, ops: list) -> dict:
    """RFC 6902: add, remove, replace, move, copy, test, in order; all or nothing."""
    out = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"a JSON patch operation needs op and path: {op!r}")
        kind, path = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{kind} at {op['path']} needs a value")
        if kind == "add":
            _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(out, path)
        elif kind == "replace":
            _remove(out, path)
            _add(out, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(out, source))
            if kind == "move":
                _remove(out, source)
            _add(out, path, value)
        elif kind == "test":
            if _get(out, path) != op["value"]:
                raise PatchError(f"test at {op['path']} failed")
        else:
            raise PatchError(f"unknown JSON patch op {kind!r}")
    return out


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f"a JSON pointer starts with /: {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _parent(doc, path: list[str]):
    if not path:
        raise PatchError("the whole document cannot be the target")
    node = doc
    for part in path[:-1]:
        node = _step(node, part, path)
    return node, path[-1]


def _step(node, part: str, path: list[str]):
    try:
        return node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchError(f"path /{'/'.join(path)} does not exist") from None


def _get(doc, path: list[str]):
    node = doc
    for part in path:
        node = _step(node, part, path)
    return node


def _add(doc, path: list[str], value) -> None:
    node, last = _parent(doc, path)
    if isinstance(node, list):
        index = len(node) if last == "-" else _index(last, len(node) + 1, path)
        node.insert(index, value)
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise PatchError(f"path /{'/'.join(path)} is inside a value")


def _remove(doc, path: list[str]) -> None:
    node, last = _parent(doc, path)
    if isinstance(node, list):
        node.pop(_index(last, len(node), path))
    elif isinstance(node, dict) and last in node:
        del node[last]
    else:
        raise PatchError(f"path /{'/'.join(path)} does not exist")


def _index(part: str, bound: int, path: list[str]) -> int:
    if not part.isdigit() or int(part) >= bound:
        raise PatchError(f"path /{'/'.join(path)}: no such index")
    return int(part)
