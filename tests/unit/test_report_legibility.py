"""The HTML report reads well: step markers and fault labels never overlap or get cut, the
chart fits the window, tables hold no Python reprs, the legend names every colour drawn, and
ENI headers name their node."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser

from cnikit.report import write_report
from tests.unit.test_report import ENI, ENI2, I1, T0, story

CHAR_W = 7.2  # the widest average glyph of the chart's 12px font, as the drawing assumes


def busy_story() -> dict:
    r = story()
    h = r["history"]
    for t, title in ((2.1, "6 pods; EC2, IMDS and the datastore agree"),
                     (2.103, "IMDS stops following the ENI (stale)"),
                     (4.0, "4 IPs released to EC2"), (9.95, "reconcile"),
                     (9.953, "more warm IPs"), (9.97, "release; IMDS catches up")):
        h.append("scenario", "info", "step", {"title": title}, at=T0 + t, mono=t)
    h.append("nemesis", "info", "ec2-assign-elsewhere",
             {"op": "ec2-assign-elsewhere", "id": None,
              "target": {"eni": ENI2, "ips": ["10.0.1.16", "10.0.1.17", "10.0.1.18", "10.0.1.19"]}},
             at=T0 + 4.5, mono=4.5)
    r["nodes"] = [{"index": 0, "name": "node-a", "instance_id": I1,
                   "enis": [{"eni_id": ENI, "device_index": 0}, {"eni_id": ENI2, "device_index": 1}]}]
    r["violations"] = None  # judged from the history
    return r


class Svg(HTMLParser):
    """The chart's elements with their attributes, and the text of each <text>."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.texts: list[tuple[dict, str]] = []
        self.groups: list[str] = []
        self._text: dict | None = None
        self._title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g":
            self.groups.append(a.get("class", ""))
        a["_group"] = self.groups[-1] if self.groups else ""
        self.elements.append((tag, a))
        if tag == "text":
            self._text = a
            self.texts.append((a, ""))
        self._title = tag == "title" or self._title

    def handle_endtag(self, tag):
        if tag == "g" and self.groups:
            self.groups.pop()
        if tag == "text":
            self._text = None
        if tag == "title":
            self._title = False

    def handle_data(self, data):
        if self._text is not None and not self._title:
            a, t = self.texts[-1]
            self.texts[-1] = (a, t + data)


def _render(tmp_path) -> tuple[str, Svg]:
    html = write_report(tmp_path, busy_story())["html"].read_text()
    svg = Svg()
    svg.feed(html[html.index("<svg"):html.index("</svg>") + 6])
    return html, svg


def test_step_markers_never_overlap(tmp_path):
    _, svg = _render(tmp_path)
    steps = [(float(a["cx"]), float(a["cy"])) for t, a in svg.elements
             if t == "circle" and a["_group"] == "step"]
    assert len(steps) == 6
    for (x1, y1), (x2, y2) in itertools.combinations(steps, 2):
        assert abs(x1 - x2) >= 16 or abs(y1 - y2) >= 16, ((x1, y1), (x2, y2))


def test_fault_and_step_labels_are_whole_and_inside_the_chart(tmp_path):
    _, svg = _render(tmp_path)
    width = float(next(a for t, a in svg.elements if t == "svg")["viewbox"].split()[2])
    labels = [(a, t) for a, t in svg.texts if a["_group"] in ("fault", "step")]
    said = [t for _, t in labels]
    assert "IMDS stale (eni_id=eni-0aaa)" in said
    assert f"ec2-assign-elsewhere eni={ENI2} ips=.16 .17 .18 .19" in said
    assert "IMDS stops following the ENI (stale)" in said
    boxes = []
    for a, t in labels:
        x = float(a["x"]) - (len(t) * CHAR_W if a.get("text-anchor") == "end" else 0)
        assert x >= 0 and x + len(t) * CHAR_W <= width + 1, (t, a)
        boxes.append((x, x + len(t) * CHAR_W, float(a["y"]), t))
    for (a0, a1, ay, at), (b0, b1, by, bt) in itertools.combinations(boxes, 2):
        assert ay != by or a1 <= b0 or b1 <= a0, f"{at!r} overlaps {bt!r}"


def test_the_chart_fits_a_normal_window(tmp_path):
    html, svg = _render(tmp_path)
    root = next(a for t, a in svg.elements if t == "svg")
    assert root.get("width") == "100%", root  # scales with the page, no fixed pixel width
    assert "height" not in root or root["height"].endswith("%") or root["height"] == "auto"
    assert re.search(r"svg\.timeline\{[^}]*height:auto", html)


def test_tables_and_labels_hold_no_python_reprs(tmp_path):
    html, _ = _render(tmp_path)
    for repr_ in ("None", "['", "[&#x27;", "{'", "{&#x27;", "True", "False"):
        assert repr_ not in html, repr_


def test_the_legend_names_every_colour_drawn(tmp_path):
    html, svg = _render(tmp_path)
    legend = html[html.index('class="legend"'):html.index("<svg")]
    calls = {a["stroke"] for t, a in svg.elements if t == "line" and a["_group"] == "call"}
    assert calls, "the EC2 calls are drawn"
    for colour in calls:
        assert colour in legend, colour
    for term in ("EC2 call that adds", "EC2 call that takes away", "EC2 call refused"):
        assert term in legend


def test_eni_headers_name_their_node(tmp_path):
    _, svg = _render(tmp_path)
    heads = [t for a, t in svg.texts if a["_group"] == "eni-head"]
    assert heads and all("node-a" in t for t in heads), heads


def test_the_cli_evidence_of_a_shared_ip_names_the_pods_without_a_list_repr():
    from cnikit.scenarios.engine import _describe

    v = _describe({"kind": "shared-ip", "subject": "10.0.1.7",
                   "detail": {"pods": ["p4", "p5"], "evidence": "pod-add"}}, {})
    assert v["what"] == "IP held by pods p4, p5 (pod-add)"
    assert (v["pod"], v["ip"]) == ("p4,p5", "10.0.1.7")
