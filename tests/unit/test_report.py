"""Reports from a hand-written history of the upstream-3019 story: the JSON validates against
the schema, the HTML parses and holds the lanes and violation markers, nothing external."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from cnikit.check.history import History
from cnikit.check.invariants import judge
from cnikit.errors import UsageError
from cnikit.report import SCHEMA, build, write_report
from cnikit.report.svg import WIDTHS

T0 = 1_800_000_000.0
I1, ENI, ENI2 = "i-0abc", "eni-0aaa", "eni-0bbb"
MAC = "02:00:00:00:00:01"


def story() -> dict:
    """Node i-0abc, ENI eni-0aaa (primary .10). Pods p0 (.11), p1 (.12), p2 (.13). IMDS goes stale;
    EC2 gains .15 (the warm pool) so IMDS and the datastore have equal lengths with different
    contents; the daemon releases .12 (p1's) at t=10; p1 goes dark."""
    h = History()

    def at(t, *a, **kw):
        return h.append(*a, at=T0 + t, mono=t, **kw)

    own = {f"10.0.1.{n}": [I1, ENI, n == 10] for n in (10, 11, 12, 13, 14)}
    own["10.0.1.20"] = [I1, ENI2, True]
    at(0, "monitor", "info", "ownership", {"version": 1, "full": True, "set": own, "unset": [],
                                           "prefixes_set": {}, "prefixes_unset": []})
    at(0.5, "client", "ok", "pod-add", {"pod": "p0", "node": 0, "instance_id": I1, "ip": "10.0.1.11"})
    at(0.6, "client", "ok", "pod-add", {"pod": "p1", "node": 0, "instance_id": I1, "ip": "10.0.1.12"})
    at(0.7, "client", "ok", "pod-add", {"pod": "p2", "node": 0, "instance_id": I1, "ip": "10.0.1.13"})
    at(1, "monitor", "info", "daemon-view", {"instance_id": I1, "ips": ["10.0.1.11", "10.0.1.12",
                                                                         "10.0.1.13", "10.0.1.14"]})
    # The nemesis's shape (cnikit.cluster.nemesis); the IMDS's own record of it is another id.
    at(2, "nemesis", "start", "imds-fault", {"op": "imds-fault", "id": "n1",
                                             "target": {"eni_id": ENI}, "kind": "stale",
                                             "duration": 12})
    at(5, "monitor", "info", "ownership", {"version": 2, "full": False,
                                           "set": {"10.0.1.15": [I1, ENI, False]}, "unset": [],
                                           "prefixes_set": {}, "prefixes_unset": []})
    at(6, "monitor", "info", "daemon-view", {"instance_id": I1, "ips": ["10.0.1.11", "10.0.1.13",
                                                                         "10.0.1.14", "10.0.1.15"]})
    at(10, "monitor", "info", "ownership", {"version": 3, "full": False, "set": {},
                                            "unset": ["10.0.1.12"], "prefixes_set": {},
                                            "prefixes_unset": []})
    at(10.2, "prober", "info", "fail", {"src": "p2", "dst": "p1", "reason": "timeout"})
    at(10.3, "prober", "info", "fail", {"src": "p0", "dst": "p1", "reason": "timeout"})
    at(10.3, "prober", "info", "fail", {"src": "p1", "dst": "p0", "reason": "timeout"})
    at(11, "monitor", "info", "daemon-view-error", {"instance_id": I1, "error": "connection refused"})
    at(12, "monitor", "info", "daemon-view", {"instance_id": I1, "ips": ["10.0.1.11", "10.0.1.13",
                                                                          "10.0.1.14", "10.0.1.15"]})
    at(16, "prober", "info", "stats", {"stale": []})
    imds = [
        {"seq": 1, "time": T0 - 5, "type": "served", "instance_id": I1, "mac": MAC, "eni_id": ENI,
         "entry": "local-ipv4s", "values": ["10.0.1.10", "10.0.1.11", "10.0.1.12", "10.0.1.13",
                                             "10.0.1.14"], "present": True},
        {"seq": 2, "time": T0 + 2, "type": "fault_added",
         "fault": {"id": "f1", "kind": "stale", "target": {"eni_id": ENI}, "duration": 12,
                   "created": T0 + 2, "expires": T0 + 14}},
        {"seq": 3, "time": T0 + 14, "type": "fault_expired",
         "fault": {"id": "f1", "kind": "stale", "target": {"eni_id": ENI}, "duration": 12,
                   "created": T0 + 2, "expires": T0 + 14}},
        {"seq": 4, "time": T0 + 14, "type": "served", "instance_id": I1, "mac": MAC, "eni_id": ENI,
         "entry": "local-ipv4s", "values": ["10.0.1.10", "10.0.1.11", "10.0.1.13", "10.0.1.14",
                                             "10.0.1.15"], "present": True},
        {"seq": 5, "time": T0 + 3, "type": "served", "instance_id": "i-other", "mac": "x",
         "eni_id": "eni-other", "entry": "local-ipv4s", "values": ["10.9.0.1"], "present": True},
    ]
    audit = [
        {"time": T0 + 4.9, "action": "AssignPrivateIpAddresses", "eni_id": ENI,
         "ips": ["10.0.1.15"], "prefixes": [], "outcome": "ok", "instance_id": I1},
        {"time": T0 + 9.95, "action": "UnassignPrivateIpAddresses", "eni_id": ENI,
         "ips": ["10.0.1.12"], "prefixes": [], "outcome": "ok", "instance_id": I1},
    ]
    return {"scenario": "imds-stale-equal-length", "profile": "vpc-cni-1.18.3", "seed": 7,
            "seconds": 16.5, "history": h, "imds_events": imds, "audit": audit}


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    p.close()
    return p


def test_report_json_validates_and_judges_the_history(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    paths = write_report(tmp_path / "r", story())
    doc = json.loads(paths["json"].read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["verdict"] == "violation"
    assert doc["seed"] == 7 and doc["profile"] == "vpc-cni-1.18.3"
    assert set(doc["versions"]) >= {"cnikit", "moto", "boto3", "python", "kernel"}
    kinds = {(v["kind"], v["subject"]) for v in doc["violations"]}
    assert ("unreachable", "p1") in kinds and ("ip-not-owned", "p1") in kinds
    assert len(doc["history"]) == 15
    # The statement names the pod, the time, the IP and the ENI that released it.
    lost = next(s for s in doc["summary"] if s.startswith("pod p1 (10.0.1.12) lost connectivity"))
    assert "t=+10.20s" in lost
    assert "because IP 10.0.1.12 was removed from ENI eni-0aaa in EC2" in lost
    assert "UnassignPrivateIpAddresses at t=+9.95s" in lost


def test_report_html_is_self_contained_and_draws_every_lane(tmp_path):
    paths = write_report(tmp_path, story())
    html = paths["html"].read_text()
    p = parse(html)
    text = " ".join(p.text)
    # Per ENI the three views, pods as lanes, the fault, the violation markers.
    assert "eni-0aaa" in text and "eni-0bbb" in text
    assert text.count("IMDS served") >= 2 and text.count("daemon datastore") >= 2
    assert "p0  10.0.1.11" in text and "p1  10.0.1.12" in text
    assert "IMDS stale (eni_id=eni-0aaa)" in text and "imds-fault eni_id=eni-0aaa kind=stale" in text
    marks = [a for t, a in p.tags if t == "g" and a.get("class") == "vmark"]
    assert len(marks) == 2 * len(WIDTHS)  # the chart is drawn once per width
    # The stale IMDS lists .12 (gone from EC2) and misses .15: drawn as a difference.
    assert "\u2260 EC2: +.12 \u2212.15" in text
    # The daemon's equal-length view (.15 instead of .12) before the release: a difference too.
    assert "\u2260 EC2: \u2212.12" in text or "+.15" in text
    # Another VPC's instance served by the same IMDS is not drawn.
    assert "eni-other" not in html
    # Nothing external: no script, no URL in src/href, no CDN.
    assert not [t for t, _ in p.tags if t in ("script", "link", "img", "iframe")]
    for _, attrs in p.tags:
        for k in ("src", "href", "xlink:href"):
            v = attrs.get(k) or ""
            assert not re.match(r"\s*(https?:)?//", v), (k, v)
    assert "http://" not in html and "https://" not in html


def test_a_run_that_holds_says_so(tmp_path):
    r = story()
    h = History()
    for e in r["history"].entries():
        if e["process"] != "prober" and not (e["f"] == "ownership" and e["value"]["version"] == 3):
            h.append(e["process"], e["type"], e["f"], e["value"], at=e["time"], mono=e["mono"])
    r["history"] = h
    doc, _ = build(r)
    assert doc["verdict"] == "holds" and doc["violations"] == []
    assert doc["summary"][0].startswith("every invariant held")


def test_given_violations_and_verdict_are_kept():
    r = story()
    r["violations"], r["warnings"], r["verdict"] = [], [], "holds"
    doc, _ = build(r)
    assert doc["verdict"] == "holds" and doc["violations"] == []


def test_bad_input_gets_one_line_reason(tmp_path):
    with pytest.raises(UsageError, match="cannot report on a int"):
        write_report(tmp_path, 42)
    with pytest.raises(UsageError, match="'history' must be a list"):
        write_report(tmp_path, {"history": "nope"})
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="cannot write the report"):
        write_report(blocker / "sub", story())


def test_empty_record_still_renders(tmp_path):
    paths = write_report(tmp_path, {"scenario": "nothing"})
    parse(paths["html"].read_text())
    assert json.loads(paths["json"].read_text())["verdict"] == "holds"


def test_a_scenario_run_result_is_reported_with_its_steps_faults_and_devices(tmp_path):
    from cnikit.scenarios.engine import RunResult

    r = story()
    h = r["history"]
    h.append("scenario", "info", "step", {"t": 0.1, "title": "IMDS stops following"}, at=T0 + 2.1)
    h.append("nemesis", "start", "ec2-fault", {"op": "ec2-fault", "id": "g1", "target": {},
                                               "kind": "throttle"}, at=T0 + 3)
    h.append("nemesis", "end", "ec2-fault", {"op": "ec2-fault", "id": "g1", "target": {}},
             at=T0 + 4)
    h.append("nemesis", "start", "imds-fault", {"op": "imds-fault", "id": "f1", "target": {},
                                                "kind": "stale"}, at=T0 + 2)
    result = RunResult("imds-stale-equal-length", "upstream 3019", "vpc-cni-1.18.3", 7, "violation",
                       "violation", 16.5, T0, history=h.entries(),
                       imds_events=r["imds_events"] + [{"error": "IMDS gone"}], audit=r["audit"],
                       nodes=[{"index": 0, "instance_id": I1, "enis": [
                           {"eni_id": ENI2, "device_index": 1}, {"eni_id": ENI, "device_index": 0}]}],
                       steps=[{"t": 0.1, "title": "IMDS stops following"}])
    result.violations = [v.to_json() for v in judge(h.entries()).violations()]
    paths = write_report(tmp_path, result)
    doc = json.loads(paths["json"].read_text())
    assert doc["description"] == "upstream 3019" and doc["steps"][0]["title"] == "IMDS stops following"
    assert doc["imds_events_unusable"] == [{"error": "IMDS gone"}]
    text = " ".join(parse(paths["html"].read_text()).text)
    assert "eni-0aaa  (i-0abc, device 0)" in text and "eni-0bbb  (i-0abc, device 1)" in text
    assert text.index("device 0") < text.index("device 1")
    assert "scenario steps" in text and "IMDS stops following" in text
    # ec2-fault paired with its end; imds-fault drawn once (from the IMDS's own record).
    assert "ec2-fault kind=throttle" in text and "t=+4.00s" in text
    assert "imds-fault kind=stale" not in text


def test_error_verdict_is_kept(tmp_path):
    r = story()
    r["verdict"], r["violations"], r["warnings"], r["error"] = "error", [], [], "cluster failed"
    paths = write_report(tmp_path, r)
    assert json.loads(paths["json"].read_text())["verdict"] == "error"
    assert "cluster failed" in paths["html"].read_text()


def test_an_inconclusive_run_is_reported_as_one_with_its_precondition(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    r = story()
    r["verdict"], r["violations"], r["warnings"] = "inconclusive", [], []
    r["precondition"] = "no address was released to EC2 within 20s"
    paths = write_report(tmp_path, r)
    doc = json.loads(paths["json"].read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["verdict"] == "inconclusive"
    assert doc["precondition"] == r["precondition"]
    assert doc["summary"][0] == f"inconclusive: precondition not met: {r['precondition']}"
    html = paths["html"].read_text()
    assert 'class="verdict inconclusive"' in html and "released to EC2 within 20s" in html


def test_a_fault_that_ended_by_itself_ends_on_the_timeline_with_why(tmp_path):
    """stale-until-change ends at the instance's next attach/detach (fault_ended, why):
    its span ends there, and says why."""
    r = story()
    added = {"id": "f2", "kind": "stale-until-change", "target": {"instance_id": I1},
             "duration": None, "created": T0 + 3, "expires": None, "missed_changes": 1}
    r["imds_events"] += [
        {"seq": 6, "time": T0 + 3, "type": "fault_added", "fault": added},
        {"seq": 7, "time": T0 + 8, "type": "fault_ended", "fault": added,
         "why": f"change 2 of {I1}'s interfaces (+02:00:00:00:00:09)"}]
    text = " ".join(parse(write_report(tmp_path, r)["html"].read_text()).text)
    assert "IMDS stale-until-change" in text
    assert "ended: change 2 of" in text
