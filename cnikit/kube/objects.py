"""The objects themselves, as an API server keeps them: one resourceVersion counter for
everything, a uid and creationTimestamp given at create, optimistic concurrency on update
(a stale resourceVersion is a Conflict), finalizers holding a deleted object with its
deletionTimestamp set, and a bounded history of changes that watches resume from (a
resourceVersion older than the history is 410 Gone, as etcd's compaction makes it).

Thread-safe: the kit's own threads (pods added, nodes registered) and the HTTP front's
event loop both call it. Stored objects are never changed in place, only replaced, so an
event's object is the object as it was."""

from __future__ import annotations

import copy
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

from cnikit.kube import patch as patches
from cnikit.kube.kinds import CRD_GROUP, Kind, Kinds
from cnikit.kube.selectors import Selector

HISTORY = 20000  # changes a watch can resume from
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ApiError(Exception):
    """An answer other than success, as a Kubernetes Status (code, reason, one line)."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')


@dataclass(frozen=True)
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    kind: tuple[str, str]
    obj: dict
    old: dict | None  # the object before a change: a selector's view may change with it
    rv: int


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Objects:
    def __init__(self, history: int = HISTORY):
        self.kinds = Kinds()
        self._lock = threading.Lock()
        self._rv = 0
        self._data: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self._history: deque[Event] = deque(maxlen=history)
        self._subscribers: set = set()
        namespaces = self.core("namespaces")
        for name in NAMESPACES:
            self.create(namespaces, None, {"metadata": {"name": name},
                                           "status": {"phase": "Active"}})

    def core(self, plural: str) -> Kind:
        """A built-in kind of the core group (pods, nodes, namespaces)."""
        return self.kinds.find("", "v1", plural)

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    # -- reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict:
        with self._lock:
            obj = self._data.get(kind.key, {}).get((namespace or "", name))
        if obj is None:
            raise not_found(kind, name)
        return copy.deepcopy(obj)

    def list(self, kind: Kind, namespace: str | None = None,
             selector: Selector | None = None) -> tuple[list[dict], int]:
        """The matching objects (every namespace when namespace is None) and the
        resourceVersion they are as of."""
        with self._lock:
            items = [o for (ns, _), o in sorted(self._data.get(kind.key, {}).items())
                     if (namespace is None or ns == namespace)
                     and (selector is None or selector.matches(o))]
            return copy.deepcopy(items), self._rv

    # -- writes ------------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str | None, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        namespace = self._namespace_of(kind, namespace, meta)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name or metadata.generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        with self._lock:
            objects = self._data.setdefault(kind.key, {})
            if (namespace or "", meta["name"]) in objects:
                raise ApiError(409, "AlreadyExists",
                               f'{kind.plural} "{meta["name"]}" already exists')
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
            meta.pop("deletionTimestamp", None)
            return self._put(kind, namespace, obj, None, "ADDED")

    def update(self, kind: Kind, namespace: str | None, name: str, obj: dict) -> dict:
        """PUT: the whole object; a resourceVersion that is not the stored one is a Conflict."""
        with self._lock:
            old = self._stored(kind, namespace, name)
            return self._replace(kind, namespace, name, old, copy.deepcopy(obj), check=True)

    def patch(self, kind: Kind, namespace: str | None, name: str, content_type: str,
              body) -> dict:
        with self._lock:
            old = self._stored(kind, namespace, name)
            try:
                new = patches.apply(content_type, old, body)
            except patches.PatchError as e:
                raise ApiError(422, "Invalid", str(e)) from None
            # A patch naming a resourceVersion asks for the same check as an update.
            check = "resourceVersion" in (body.get("metadata") or {}) if isinstance(
                body, dict) else False
            return self._replace(kind, namespace, name, old, new, check=check)

    def delete(self, kind: Kind, namespace: str | None, name: str) -> dict:
        """Removed, or only marked with a deletionTimestamp while finalizers remain."""
        with self._lock:
            old = self._stored(kind, namespace, name)
            if old["metadata"].get("finalizers"):
                return self._mark_deleting(kind, namespace, old)
            return self._remove(kind, namespace, old)

    def mark_deleting(self, kind: Kind, namespace: str | None, name: str) -> dict:
        """The graceful delete's first step: deletionTimestamp set, the object kept (as an
        API server does for a pod until its kubelet has torn it down)."""
        with self._lock:
            old = self._stored(kind, namespace, name)
            return self._mark_deleting(kind, namespace, old)

    def _mark_deleting(self, kind: Kind, namespace: str | None, old: dict) -> dict:
        if old["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(old)
        new = {**old, "metadata": {**old["metadata"], "deletionTimestamp": now(),
                                   "deletionGracePeriodSeconds": 0}}
        return self._put(kind, namespace, new, old, "MODIFIED")

    # -- watching ----------------------------------------------------------------------------

    def watch(self, kind: Kind, since: str | None, deliver):
        """Start a watch of every object of a kind: (the events before it, as a list; a
        function that ends it). `deliver(event)` is called, under the store's lock, for
        every later change (it must not block: hand the event on). `since` None or "0":
        every current object as ADDED first; a resourceVersion: the changes after it."""
        with self._lock:
            if since in (None, "", "0"):
                first = [Event("ADDED", kind.key, o, None, int(o["metadata"]["resourceVersion"]))
                         for _, o in sorted(self._data.get(kind.key, {}).items())]
            else:
                first = self._since(kind, since)

            def pick(event: Event) -> None:
                if event.kind == kind.key:
                    deliver(event)

            self._subscribers.add(pick)
        return first, lambda: self._unsubscribe(pick)

    def _since(self, kind: Kind, since: str) -> list[Event]:
        try:
            rv = int(since)
        except ValueError:
            raise ApiError(400, "BadRequest", f"resourceVersion {since!r} is not a number") from None
        oldest = self._history[0].rv if self._history else self._rv + 1
        if len(self._history) == self._history.maxlen and rv < oldest - 1:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({oldest - 1})")
        return [e for e in self._history if e.rv > rv and e.kind == kind.key]

    def _unsubscribe(self, pick) -> None:
        with self._lock:
            self._subscribers.discard(pick)

    # -- under the lock ----------------------------------------------------------------------

    def _namespace_of(self, kind: Kind, namespace: str | None, meta: dict) -> str | None:
        if not kind.namespaced:
            meta.pop("namespace", None)
            return None
        namespace = namespace or meta.get("namespace")
        if not namespace:
            raise ApiError(400, "BadRequest", f"{kind.plural} are namespaced: a namespace is needed")
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", f"the namespace of the object "
                           f"({meta['namespace']}) does not match the request's ({namespace})")
        meta["namespace"] = namespace
        return namespace

    def _stored(self, kind: Kind, namespace: str | None, name: str) -> dict:
        obj = self._data.get(kind.key, {}).get((namespace or "", name))
        if obj is None:
            raise not_found(kind, name)
        return obj

    def _replace(self, kind: Kind, namespace: str | None, name: str, old: dict, new: dict,
                 check: bool) -> dict:
        meta = new.setdefault("metadata", {})
        given = meta.get("resourceVersion")
        if check and given not in (None, "") and given != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} '
                           f'"{name}": the object has been modified; please apply your changes '
                           "to the latest version and try again")
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", f"the name of the object ({meta['name']}) does "
                           f"not match the name on the URL ({name})")
        self._namespace_of(kind, namespace, meta)
        kept = ("name", "uid", "creationTimestamp", "deletionTimestamp",
                "deletionGracePeriodSeconds", "generation")
        meta.update({k: old["metadata"][k] for k in kept if k in old["metadata"]})
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(kind, namespace, old)
        return self._put(kind, namespace, new, old, "MODIFIED")

    def _put(self, kind: Kind, namespace: str | None, obj: dict, old: dict | None,
             event: str) -> dict:
        self._rv += 1
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self._rv)}
        self._data.setdefault(kind.key, {})[(namespace or "", obj["metadata"]["name"])] = obj
        if kind.group == CRD_GROUP:
            self.kinds.add_crd(obj)
        self._emit(Event(event, kind.key, obj, old, self._rv))
        return copy.deepcopy(obj)

    def _remove(self, kind: Kind, namespace: str | None, old: dict) -> dict:
        self._rv += 1
        del self._data[kind.key][(namespace or "", old["metadata"]["name"])]
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self._rv)}}
        self._emit(Event("DELETED", kind.key, gone, old, self._rv))
        return copy.deepcopy(gone)

    def _emit(self, event: Event) -> None:
        self._history.append(event)
        for deliver in list(self._subscribers):
            deliver(event)
