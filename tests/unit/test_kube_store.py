"""The cluster's object store alone (cnikit.kube), over HTTP: what an API server's clients
rely on beyond the happy path (conflicts, finalizers, watch resumption, selectors, patch
types, one-line errors). Real clients against it: test_kube_clients.py."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from cnikit.kube import KubeApi, Objects
from cnikit.kube.patch import STRATEGIC, strategic_merge
from tests.waiting import wait_for


@pytest.fixture
def api():
    with KubeApi(objects=Objects(history=8)) as api:
        yield api


def call(api, method: str, path: str, body=None, content_type="application/json"):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api.url + path, data=data, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **meta) -> dict:
    return {"metadata": {"name": name, **meta}, "spec": {"nodeName": "n0"}}


def test_a_stale_resource_version_is_a_conflict(api):
    _, created = call(api, "POST", PODS, pod("a"))
    stale = created["metadata"]["resourceVersion"]
    status, _ = call(api, "PUT", f"{PODS}/a", {**created, "spec": {"nodeName": "n1"}})
    assert status == 200
    status, answer = call(api, "PUT", f"{PODS}/a", {**created, "spec": {"nodeName": "n2"}})
    assert (status, answer["reason"]) == (409, "Conflict"), stale
    assert call(api, "POST", PODS, pod("a"))[1]["reason"] == "AlreadyExists"


def test_finalizers_hold_a_deleted_object_until_they_are_gone(api):
    call(api, "POST", PODS, pod("a", finalizers=["cnikit.test/hold"]))
    status, held = call(api, "DELETE", f"{PODS}/a")
    assert status == 200 and held["metadata"]["deletionTimestamp"]
    assert call(api, "GET", f"{PODS}/a")[0] == 200
    call(api, "PATCH", f"{PODS}/a", {"metadata": {"finalizers": None}},
         "application/merge-patch+json")
    assert call(api, "GET", f"{PODS}/a")[0] == 404


def watch_lines(api, path: str, lines: list) -> threading.Thread:
    def read():
        with urllib.request.urlopen(api.url + path, timeout=30) as r:
            for line in r:
                lines.append(json.loads(line))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_a_watch_resumes_from_a_resource_version_and_too_old_is_gone(api):
    _, first = call(api, "POST", PODS, pod("a"))
    call(api, "POST", PODS, pod("b"))
    lines: list = []
    watch_lines(api, f"{PODS}?watch=1&timeoutSeconds=5&resourceVersion="
                     f"{first['metadata']['resourceVersion']}", lines)
    wait_for(lambda: lines, what="the change after the resourceVersion")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "b")]
    for n in range(10):  # more changes than the store's history keeps
        call(api, "POST", PODS, pod(f"p{n}"))
    status, gone = call(api, "GET", f"{PODS}?watch=1&resourceVersion=1")
    assert (status, gone["reason"]) == (410, "Expired")


def test_a_selective_watch_sees_an_object_leave_and_join_its_selection(api):
    call(api, "POST", PODS, pod("a", labels={"app": "web"}))
    lines: list = []
    watch_lines(api, f"{PODS}?watch=true&labelSelector=app%3Dweb&timeoutSeconds=10", lines)
    wait_for(lambda: lines, what="the initial ADDED")
    merge = "application/merge-patch+json"
    call(api, "PATCH", f"{PODS}/a", {"metadata": {"labels": {"app": "db"}}}, merge)
    call(api, "PATCH", f"{PODS}/a", {"metadata": {"labels": {"app": "web"}}}, merge)
    wait_for(lambda: len(lines) >= 3, what="three events")
    assert [e["type"] for e in lines] == ["ADDED", "DELETED", "ADDED"]


def test_field_and_label_selectors_filter_lists(api):
    call(api, "POST", PODS, pod("a", labels={"tier": "web"}))
    call(api, "POST", PODS, {"metadata": {"name": "b"}, "spec": {"nodeName": "n1"}})
    names = lambda q: [i["metadata"]["name"] for i in call(api, "GET", f"{PODS}?{q}")[1]["items"]]  # noqa: E731
    assert names("fieldSelector=spec.nodeName%3Dn1") == ["b"]
    assert names("labelSelector=tier+in+(web,db)") == ["a"]
    assert names("labelSelector=!tier") == ["b"]
    status, bad = call(api, "GET", f"{PODS}?labelSelector=a+in+b")
    assert status == 400 and "does not parse" in bad["message"]


def test_patch_types_and_their_errors(api):
    call(api, "POST", "/api/v1/nodes", {"metadata": {"name": "n0"}, "status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}]}})
    status, node = call(api, "PATCH", "/api/v1/nodes/n0/status",
                        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                        STRATEGIC)
    assert status == 200
    assert node["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                            {"type": "MemoryPressure", "status": "False"}]
    status, answer = call(api, "PATCH", "/api/v1/nodes/n0",
                          [{"op": "test", "path": "/metadata/name", "value": "other"}],
                          "application/json-patch+json")
    assert (status, answer["reason"]) == (422, "Invalid")
    status, answer = call(api, "PATCH", "/api/v1/nodes/n0", {}, "application/apply-patch+yaml")
    assert status == 415 and "\n" not in answer["message"]


def test_strategic_merge_deletes_by_key_and_unions_finalizers():
    doc = {"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "x", "image": "1"},
                                                                      {"name": "y"}]}}
    out = strategic_merge(doc, {"metadata": {"finalizers": ["b"]}, "spec": {"containers": [
        {"name": "y", "$patch": "delete"}, {"name": "x", "image": "2"}]}})
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["spec"]["containers"] == [{"name": "x", "image": "2"}]
    assert doc["spec"]["containers"][0]["image"] == "1"  # the stored object is not changed


def test_unknown_paths_answer_a_status_and_a_custom_kind_registers_on_first_create(api):
    status, answer = call(api, "GET", "/api/v1/widgets")
    assert (status, answer["kind"], answer["reason"]) == (404, "Status", "NotFound")
    path = "/apis/example.com/v1/namespaces/default/widgets"
    status, _ = call(api, "POST", path, {"apiVersion": "example.com/v1", "kind": "Widget",
                                         "metadata": {"name": "w"}})
    assert status == 201
    assert call(api, "GET", "/apis/example.com/v1")[1]["resources"][0]["kind"] == "Widget"
    assert [g["name"] for g in call(api, "GET", "/apis")[1]["groups"]] == [
        "apiextensions.k8s.io", "example.com"]
