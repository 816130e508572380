"""The HTML report reads well: step markers and fault labels never overlap or get cut, the
chart fits the window, tables hold no Python reprs, the legend names every colour drawn, and
ENI headers name their node."""

from __future__ import annotations

import itertools
import json
import re
from html import unescape
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
    from cnikit.scenarios.engine.result import _describe

    v = _describe({"kind": "shared-ip", "subject": "10.0.1.7",
                   "detail": {"pods": ["p4", "p5"], "evidence": "pod-add"}}, {})
    assert v["what"] == "IP held by pods p4, p5 (pod-add)"
    assert (v["pod"], v["ip"]) == ("p4,p5", "10.0.1.7")


def test_no_label_in_the_chart_is_cut(tmp_path):
    """Every step's label is drawn whole (wrapped at words at most), and nothing anywhere in
    the chart ends in the ellipsis of a cut label."""
    _, svg = _render(tmp_path)
    assert not [t for _, t in svg.texts if "\u2026" in t]
    lines = [(float(a["y"]), t) for a, t in svg.texts
             if a["_group"] == "step" and a.get("class") == "lbl"]
    said = " ".join(t for _, t in lines)
    for title in ("6 pods; EC2, IMDS and the datastore agree", "more warm IPs",
                  "IMDS stops following the ENI (stale)", "4 IPs released to EC2",
                  "release; IMDS catches up"):
        assert title in said or all(w in said.split() for w in title.split()), title


def test_the_chart_is_never_drawn_smaller_than_its_units_and_fits_900px(tmp_path):
    from cnikit.report.svg import MAX_ZOOM, WIDTH

    html, svg = _render(tmp_path)
    width = float(next(a for t, a in svg.elements if t == "svg")["viewbox"].split()[2])
    assert width == WIDTH
    css = re.search(r"svg\.w840\{([^}]*)\}", html).group(1)
    assert f"min-width:{width:g}px" in css  # 1:1 at least: a 11px font stays 11px
    assert f"max-width:{round(WIDTH * MAX_ZOOM)}px" in css and MAX_ZOOM <= 1.4
    sizes = [int(x) for x in re.findall(r"svg [^{]*\{[^}]*font-size:(\d+)px", html)]
    assert sizes and min(sizes) >= 11, sizes
    # A 900px window: 12px margins each side and a 15px scrollbar leave room for it.
    assert width + 2 * 12 + 15 <= 900
    assert re.search(r"@media \(max-width:\d+px\)\{body\{margin:12px\}\}", html)
    # Every tick label stays inside the drawing (the last one is not cut at the edge).
    for a, t in svg.texts:
        if a.get("class") == "tick":
            half = len(t) * CHAR_W / 2
            assert float(a["x"]) - half >= 0 and float(a["x"]) + half <= width, (t, a)


def _legend_colours(html: str) -> list[str]:
    legend = html[html.index('class="legend"'):html.index("<svg")]
    return re.findall(r'<i style="background:(#[0-9a-f]{6})"', legend)


def test_every_legend_entry_has_a_colour_of_its_own(tmp_path):
    from cnikit.check.palette import MIN_DISTANCE, closest_pair

    html, _ = _render(tmp_path)
    colours = _legend_colours(html)
    assert len(colours) >= 14 and len(set(colours)) == len(colours), colours
    # With room to spare: a new checker's colour has somewhere to go.
    d, a, b = closest_pair(colours)
    assert d >= MIN_DISTANCE + 3, f"{a} and {b} are too alike to tell apart ({d:.1f})"


def test_the_pairs_a_reader_confused_are_told_apart():
    from cnikit.check.checkers import checker_of
    from cnikit.check.palette import C_EC2, C_FAULT, MIN_DISTANCE, distance

    # EC2's steel blue against the retry's old navy (18.3), the fault's yellow against the
    # shared IP's old olive (10.8, which the rule refuses): both now far apart.
    assert distance(C_EC2, checker_of("runtime-retry").colour) >= 2 * MIN_DISTANCE
    assert distance(C_FAULT, checker_of("shared-ip").colour) >= 2 * MIN_DISTANCE
    # The rule is perceptual: olive and yellow are 63 apart in RGB, which passed the old rule.
    assert distance("#bcbd22", "#edc948") < MIN_DISTANCE


def test_violations_are_listed_in_time_order(tmp_path):
    r = story()
    r["violations"] = [
        {"kind": "unreachable", "subject": "p1", "since": T0 + 10.2, "until": None,
         "detail": {"failing_pairs": 2}},
        {"kind": "ip-not-owned", "subject": "p2", "since": T0 + 12, "until": None,
         "detail": {"ip": "10.0.1.13", "node": I1, "held_by": None}},
        {"kind": "ip-not-owned", "subject": "p1", "since": T0 + 10, "until": None,
         "detail": {"ip": "10.0.1.12", "node": I1, "held_by": None}},
    ]
    r["warnings"] = []
    html = write_report(tmp_path, r)["html"].read_text()
    table = html[html.index("<h2>Violations</h2>"):]
    rows = re.findall(r'<tr><td>(\d+)</td><td class="nw">[^<]*</td><td class="nw">([^<]*)</td>'
                      r'<td class="nw">t=\+([\d.]+)s', table)
    assert [float(t) for _, _, t in rows] == sorted(float(t) for _, _, t in rows)
    assert [(n, s) for n, s, _ in rows] == [("1", "p1"), ("2", "p1"), ("3", "p2")]
    # A detail without a value says what that means.
    assert "held by: no instance" in table


def _root(html: str) -> list[str]:
    return re.findall(r'<p class="root"><b>Root cause:</b> (.*?)</p>', html)


def test_a_violation_run_says_its_root_cause_first_from_the_chain(tmp_path):
    html = write_report(tmp_path, story())["html"].read_text()
    root = _root(html)
    assert len(root) == 1 and html.index('class="root"') < html.index("<h2>Summary</h2>")
    # The 3019 story: IMDS stale, equal lengths, the daemon dropped and released p1's IP.
    assert "compared only lengths" in root[0] and "(1 + 4 = 5 addresses)" in root[0]
    assert "released .12 to EC2: pod p1 went dark." in root[0]


def test_the_root_cause_is_one_short_sentence(tmp_path):
    """The cause, what the build did and what it cost, in three lines at most at 900 px
    (about 110 characters a line): the chains under it carry every address, time and call."""
    from tests.unit.test_report_drawing import reuse_story

    for n, r in enumerate((story(), busy_story(), reuse_story())):
        for root in _root(write_report(tmp_path / str(n), r)["html"].read_text()):
            text = unescape(root.split(" <span")[0])
            assert text.endswith(".") and not re.search(r"[^.\s]\. ", text), text
            assert ";" not in text and len(text) <= 300, text


def test_the_root_cause_follows_the_record_not_one_scenario(tmp_path):
    """A freed address that came back as another ENI's primary, with no IMDS discrepancy
    before the change: no claim about lengths, and what the record has is said."""
    from tests.unit.test_report_drawing import reuse_story

    html = write_report(tmp_path, reuse_story())["html"].read_text()
    root = _root(html)
    assert len(root) == 1 and "lengths" not in root[0]
    assert "p1" in root[0]


def test_a_run_that_holds_has_no_root_cause(tmp_path):
    r = story()
    r["violations"], r["warnings"], r["verdict"] = [], [], "holds"
    paths = write_report(tmp_path, r)
    assert not _root(paths["html"].read_text())
    assert json.loads(paths["json"].read_text())["root_cause"] == []


def test_terms_are_explained_once_when_the_page_uses_them(tmp_path):
    html, _ = _render(tmp_path)
    terms = re.findall(r"<dt>([^<]+)</dt>", html)
    assert {"datastore", "ENI", "IMDS"} <= set(terms) and len(terms) == len(set(terms))
    assert "warm pool" not in terms and "local-ipv4s" not in terms  # not on this page
    r = busy_story()
    r["history"].append("scenario", "info", "step",
                        {"title": "the warm pool grows; local-ipv4s lags"}, at=T0 + 12, mono=12)
    html = write_report(tmp_path / "more", r)["html"].read_text()
    assert {"warm pool", "local-ipv4s"} <= set(re.findall(r"<dt>([^<]+)</dt>", html))


def test_the_cli_lists_violations_in_time_order_naming_every_kind():
    from cnikit.scenarios.engine import RunResult

    r = RunResult("s", "", "p", 1, "violation", "violation", 1.0, 0.0)
    r.violations = [{"kind": k, "since": t, "until": None, "subject": p, "pod": p, "ip": "x",
                     "what": "w"} for k, t, p in
                    [("ip-not-owned", 9.0, "p7"), ("unreachable", 9.3, "p7"),
                     ("shared-ip", 10.8, "p7"), ("ip-not-owned", 9.0, "p8"),
                     ("unreachable", 9.32, "p9")]]
    times = [float(line.split("s ")[0]) for line in r.evidence()]
    assert times == sorted(times) and len(times) == 5
    short = r.evidence(3)
    assert [line.split()[1] for line in short[:3]] == ["ip-not-owned:", "unreachable:",
                                                       "shared-ip:"]
    assert short[3] == "... and 2 more"


# CSS's colours for the words the docs may use; a word names a colour when it is the nearest.
COLOUR_WORDS = {"blue": "#0000ff", "red": "#ff0000", "grey": "#808080", "orange": "#ffa500",
                "cyan": "#00ffff", "brown": "#a52a2a", "green": "#008000", "purple": "#800080",
                "yellow": "#ffff00", "pink": "#ffc0cb"}


def test_the_docs_name_the_legends_colours():
    from pathlib import Path

    from cnikit.check.palette import C_ADD, C_DIFF, C_FAILED, C_TAKE, distance

    def word(colour: str) -> str:
        return min(COLOUR_WORDS, key=lambda w: distance(colour, COLOUR_WORDS[w]))

    doc = " ".join((Path(__file__).parents[2] / "docs" / "pytest.md").read_text().split())
    calls = re.search(r"EC2 calls \((\w+) adds, (\w+) takes away, (\w+) refused\)", doc)
    assert calls, "docs/pytest.md names the colours of the EC2 calls"
    assert calls.groups() == (word(C_ADD), word(C_TAKE), word(C_FAILED))
    diff = re.search(r"segments that differ from EC2 are (\w+)", doc)
    assert diff and diff.group(1) == word(C_DIFF)


def test_a_run_that_holds_says_why_first(tmp_path):
    r = story()
    r["history"] = [e for e in r["history"].entries() if e.get("process") != "nemesis"]
    r["violations"], r["warnings"], r["verdict"] = [], [], "holds"
    r["exposure"] = {"exposed": True, "faults": [
        {"id": "f1", "op": "imds-fault", "kind": "stale", "reached": 15, "line": "..."},
        {"id": None, "op": "ec2-assign-elsewhere", "kind": None, "reached": 1, "line": "..."}]}
    html = write_report(tmp_path, r)["html"].read_text()
    why = re.findall(r'<p class="root held"><b>Why it held:</b> (.*?)</p>', html)
    assert why == ["the build met its faults (IMDS stale 15 times, ec2-assign-elsewhere once) "
                   "and all 3 pods kept their addresses and their peers throughout."]
    assert html.index('class="root held"') < html.index("<h2>Summary</h2>")
    assert "met its faults" not in html[html.index("<h2>Summary</h2>"):]  # said once


def _charts(html: str) -> list[Svg]:
    """Each drawing of the chart (one per width), parsed."""
    out = []
    for part in html.split("<svg")[1:]:
        svg = Svg()
        svg.feed("<svg" + part[:part.index("</svg>") + 6])
        out.append(svg)
    return out


def test_labels_keep_to_the_axis_beside_their_marks_and_off_the_violation_lines(tmp_path):
    """At every width: fault and step labels inside the time axis, above where violation
    lines start; a fault's label beside its mark; no label inside a lane crossed by one."""
    from cnikit.report.svg import RIGHT, SMALL_W, WIDTHS

    r = busy_story()
    r["history"].append("nemesis", "info", "ec2-assign-elsewhere",
                        {"op": "ec2-assign-elsewhere", "id": None,
                         "target": {"eni": ENI2, "ips": ["10.0.1.20", "10.0.1.21"]}},
                        at=T0 + 10.6, mono=10.6)
    charts = _charts(write_report(tmp_path, r)["html"].read_text())
    assert len(charts) == len(WIDTHS)
    for svg, width in zip(charts, WIDTHS, strict=True):
        left = min(float(a["x1"]) for t, a in svg.elements if a.get("class") == "grid")
        right = width - RIGHT
        lines = [a for t, a in svg.elements if t == "line" and a["_group"] == "vmark"]
        assert lines, "the story has violations"
        top = min(float(a["y1"]) for a in lines)
        xs = [float(a["x1"]) for a in lines]
        for a, text in svg.texts:
            small = a.get("class") in ("flbl", "seg", "seg on-dark")
            w = len(text) * (SMALL_W if small else CHAR_W)
            x0 = float(a["x"]) - (w if a.get("text-anchor") == "end" else 0)
            if a["_group"] in ("fault", "step") and a.get("class") in ("lbl", "flbl"):
                assert left - 1 <= x0 and x0 + w <= right + 1, (width, text, x0, x0 + w)
                assert float(a["y"]) < top, (width, text)
            if a.get("class", "").startswith("seg"):
                assert not [x for x in xs if x0 - 1 <= x <= x0 + w + 1], (width, text, x0, xs)
        # Each instant fault's label starts or ends within a few pixels of its diamond.
        marks = [float(a["d"].split(",")[0][1:]) for t, a in svg.elements if t == "path"
                 and a["_group"] == "fault"]
        labels = [a for a, _ in svg.texts if a.get("class") == "flbl"]
        for a in labels:
            x = float(a["x"])
            assert any(abs(x - m) <= 12 for m in marks) or a["_group"] == "fault" and any(
                abs(x - float(r["x"])) <= 12 for t, r in svg.elements
                if t == "rect" and r["_group"] == "fault"), (width, a)
