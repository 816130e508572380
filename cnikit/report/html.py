"""The self-contained HTML report: inline CSS and one inline SVG drawn here, no script, no
external resource, so it opens offline and in any mail or CI artifact viewer.

Top to bottom: the summary, the root cause (each violation's chain from cnikit.report.cause,
violations sharing every cause as one chain), the legend, the chart, the tables.

Chart rows: faults (labelled bars, packed so that no two labels meet; each also shades the
whole chart), the scenario's numbered steps, EC2 calls (ticks), per ENI the three views of its
IPs, one lane per pod, then per IP a violation names its holders in each view. Violations are
numbered red lines through the chart. Hovering a segment shows its IPs (SVG <title>). The SVG
has no pixel size: it scales to the page's width.
"""

from __future__ import annotations

import html
import math
import textwrap

from cnikit.check.checkers import CHECKERS, checker_of, in_order
from cnikit.report.rootcause import chain_groups
from cnikit.report.timeline import Segment, Timeline, fmt, sorted_ips, value_at
from cnikit.report.words import rel, short

# The drawing's own units are CSS pixels: it is never drawn smaller than WIDTH (so its
# smallest font, 11px, stays 11px), and fits a 900px window beside the page's margins.
# Wider windows scale it up to MAX_ZOOM, no further (fonts past ~15px read as shouting).
WIDTH, RIGHT = 840, 20
MAX_ZOOM = 1.3
LABEL_MIN, LABEL_MAX = 150, 340  # the lane-name column, fitted to its longest name
LANE_H, LANE_GAP, GROUP_GAP = 18, 3, 12
TOP = 34
CHAR_W = 7.2  # the widest average glyph of the 12px font: labels are packed by it

# One colour per meaning: no two legend entries share one (tests/unit check it).
C_EC2, C_IMDS, C_DAEMON, C_DIFF = "#4e79a7", "#59a14f", "#8c6bb1", "#f28e2b"
C_POD = "#c9d6c2"
# A violation on a pod's lane is drawn in its checker's colour (Checker.colour); one whose
# checker declares none is drawn dark, as a lost pod is.
C_VIOLATION_DEFAULT = "#3d3d3d"
C_FAULT, C_VIOL = "#edc948", "#d62728"
C_HOLDER, C_FAILED = "#a0cbe8", "#999999"
C_ADD, C_TAKE = "#17becf", "#8c564b"
RELEASES = ("Unassign", "Detach", "Delete")


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def tw(text: str) -> float:
    return len(text) * CHAR_W


def dark(fill: str) -> bool:
    """Whether a fill is dark enough to take white text (else the text is dark)."""
    if not (fill.startswith("#") and len(fill) == 7):
        return False
    r, g, b = (int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b <= 0.55


def label_width(tl: Timeline) -> float:
    """The lane-name column: wide enough for every lane's name (pods are the longest)."""
    names = [tw(f"{p.name}  {p.ip}") + 14 for p in tl.pods] + [tw("daemon datastore") + 14]
    return min(max(LABEL_MIN, 8 + max(names) + 12), LABEL_MAX)


def _place(rows: list[float], x0: float, x1: float) -> int:
    """The first row free from x0 on (a new one if none is), marked taken up to x1."""
    for i, free_at in enumerate(rows):
        if free_at <= x0:
            rows[i] = x1
            return i
    rows.append(x1)
    return len(rows) - 1


def _ticks(span: float) -> float:
    raw = span / 10
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


class Svg:
    def __init__(self, tl: Timeline):
        self.tl = tl
        self.parts: list[str] = []
        self.y = TOP
        self.span = max(tl.t1 - tl.t0, 1e-3)
        self.left = label_width(tl)  # where the plot starts
        self.right = WIDTH - RIGHT
        self.plot_w = self.right - self.left

    def x(self, t: float) -> float:
        return self.left + (min(max(t, self.tl.t0), self.tl.t1) - self.tl.t0) / self.span * self.plot_w

    def lane(self) -> None:
        self.add(f'<rect x="{self.left:.1f}" y="{self.y}" width="{self.plot_w:.1f}" '
                 f'height="{LANE_H}" class="lane"/>')

    def add(self, s: str) -> None:
        self.parts.append(s)

    def label(self, text: str, y: float, bold: bool = False, indent: int = 0, title: str = "",
              group: str = "") -> None:
        w = ' font-weight="600"' if bold else ""
        t = f"<title>{esc(title)}</title>" if title else ""
        g0, g1 = (f'<g class="{group}">', "</g>") if group else ("", "")
        self.add(f'{g0}<text x="{8 + indent}" y="{y + LANE_H - 5}" class="lbl"{w}>{t}'
                 f'{esc(text)}</text>{g1}')

    def beside(self, x0: float, x1: float, text: str) -> tuple[float, str, float, float]:
        """Where a label for a mark spanning x0..x1 goes: after x0, or ending at the right
        edge when it would run past it. (x, anchor, left, right)."""
        right = self.right
        if x0 + 4 + tw(text) <= right:
            return x0 + 4, "start", x0, max(x1, x0 + 4 + tw(text))
        return right, "end", min(x0, right - tw(text)), right

    def rect(self, t0: float, t1: float, y: float, fill: str, title: str = "", text: str = "",
             h: float = LANE_H, cls: str = "") -> None:
        x0, x1 = self.x(t0), self.x(t1)
        w = max(x1 - x0, 1.5)
        c = f' class="{cls}"' if cls else ""
        tt = f"<title>{esc(title)}</title>" if title else ""
        self.add(f'<g{c}><rect x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" '
                 f'fill="{fill}" rx="2">{tt}</rect>')
        if text and w <= 7 * len(text) + 6:
            text = text.split(" ", 1)[0]  # a set keeps its count alone; the hover has it all
        if text and w > 7 * len(text) + 6:
            cls = "seg on-dark" if dark(fill) else "seg"
            self.add(f'<text x="{x0 + 4:.1f}" y="{y + h - 5:.1f}" class="{cls}">{tt}'
                     f'{esc(text)}</text>')
        self.add("</g>")


def _diff(ips, ref) -> tuple[list[str], list[str]]:
    if ips is None or ref is None:
        return [], []
    return sorted_ips(ips - ref), sorted_ips(ref - ips)


def _pieces(view: list[Segment], ec2: list[Segment]) -> list[tuple[float, float, object, object]]:
    """Split a view at EC2's change points: (start, end, ips, ips in EC2 then), merged."""
    cuts = sorted({s.start for s in view} | {s.start for s in ec2} | {s.end for s in view})
    out: list[list] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b <= a:
            continue
        mid = (a + b) / 2
        ips = value_at(view, mid)
        if ips is None and not any(s.start <= mid <= s.end for s in view):
            continue  # the view is not known here at all
        ref = value_at(ec2, mid)
        if out and out[-1][1] == a and out[-1][2] == ips and out[-1][3] == ref:
            out[-1][1] = b
        else:
            out.append([a, b, ips, ref])
    return [tuple(p) for p in out]


def _lane(svg: Svg, name: str, view: list[Segment], ec2: list[Segment] | None, color: str,
          y: float) -> None:
    svg.label(name, y, indent=14)
    svg.lane()
    if ec2 is None:
        pieces = [(s.start, s.end, s.ips, s.ips) for s in view]
    else:
        pieces = _pieces(view, ec2)
    for a, b, ips, ref in pieces:
        if ips is None:
            svg.rect(a, b, y, "url(#absent)", f"{name}: absent / unknown", "absent", cls="absent")
            continue
        extra, missing = _diff(ips, ref) if ec2 is not None else ([], [])
        fill = C_DIFF if (extra or missing) else color
        text = f"{len(ips)}"
        if extra or missing:
            text += " \u2260 EC2: " + " ".join(["+" + short(i) for i in extra] +
                                              ["\u2212" + short(i) for i in missing])
        title = (f"{name} {rel(svg.tl, a)} .. {rel(svg.tl, b)}: {len(ips)} IPs\n"
                 + " ".join(sorted_ips(ips)))
        if extra:
            title += "\nnot in EC2: " + " ".join(extra)
        if missing:
            title += "\nin EC2 but not here: " + " ".join(missing)
        svg.rect(a, b, y, fill, title, text)


def _violation_ips(tl: Timeline, violations: list[dict]) -> dict[str, list[int]]:
    ips: dict[str, list[int]] = {}
    pod_ip = {p.name: p.ip for p in tl.pods}
    for n, v in enumerate(violations, 1):
        d = v.get("detail") or {}
        ip = v.get("subject") if checker_of(v.get("kind") or "").subject_names == "ip" \
            else d.get("ip") or pod_ip.get(v.get("subject"))
        if ip:
            ips.setdefault(ip, []).append(n)
    return dict(list(ips.items())[:8])


def _holders(tl: Timeline, ip: str) -> list[tuple]:
    """(start, end, eni, instance, primary) for each EC2 holder of ip over the run."""
    out = []
    changes = tl.ip_owners.get(ip, [])
    for n, (t, eni, inst, primary) in enumerate(changes):
        end = changes[n + 1][0] if n + 1 < len(changes) else tl.t1
        if eni is not None and end > tl.t0:
            out.append((max(t, tl.t0), end, eni, inst, primary))
    return out


def _ip_stories(svg: Svg, violations: list[dict]) -> None:
    """For each IP a violation names: which ENI held it in each view, and which pod."""
    tl = svg.tl
    for ip, nums in _violation_ips(tl, violations).items():
        svg.y += GROUP_GAP
        svg.label(f"IP {ip}  (violation {', '.join(f'#{n}' for n in nums)})", svg.y, bold=True)
        svg.y += LANE_H
        for name, attr, color in (("EC2 holder", "ec2", C_EC2), ("IMDS lists it", "imds", C_IMDS),
                                  ("daemon holds it", "daemon", C_DAEMON)):
            svg.label(name, svg.y, indent=14)
            svg.lane()
            if attr == "ec2":
                # From every ownership change of the address, so that a holder is drawn
                # whatever the address is to it (a secondary IP, or later a primary one).
                for a, b, eni, inst, primary in _holders(tl, ip):
                    node = tl.node_of(inst) or inst
                    what = f"{eni} (primary IP)" if primary else eni
                    svg.rect(a, b, svg.y, C_EC2, f"{name}: {what} of {node} {rel(tl, a)} .. "
                             f"{rel(tl, b)}", what)
                svg.y += LANE_H + LANE_GAP
                continue
            for eni in tl.enis:
                held: list[list[float]] = []
                for seg in getattr(eni, attr):
                    if seg.ips is not None and ip in seg.ips:
                        if held and held[-1][1] >= seg.start:
                            held[-1][1] = seg.end
                        else:
                            held.append([seg.start, seg.end])
                for a, b in held:
                    svg.rect(a, b, svg.y, color,
                             f"{name}: {eni.eni_id} {rel(tl, a)} .. {rel(tl, b)}", eni.eni_id)
            svg.y += LANE_H + LANE_GAP
        svg.label("pod using it", svg.y, indent=14)
        svg.lane()
        for p in tl.pods:
            if p.ip == ip:
                svg.rect(p.start, p.end, svg.y, C_HOLDER, f"{p.name} {rel(tl, p.start)} .. "
                         f"{rel(tl, p.end) if p.deleted else 'end'}", p.name)
        svg.y += LANE_H + LANE_GAP


def _faults(svg: Svg) -> None:
    """One row per set of faults whose bars and labels do not meet; every label whole."""
    tl = svg.tl
    rows: list[float] = []
    placed = []
    for f in sorted(tl.faults, key=lambda s: s.start):
        x0 = svg.x(f.start)
        x1 = x0 + 6 if f.instant else max(svg.x(f.end), x0 + 1.5)
        lx, anchor, left, right = svg.beside(x0 + (7 if f.instant else 0), x1, f.label)
        placed.append((_place(rows, left - 6, right + 10), f, lx, anchor))
    if not placed:
        return
    svg.label("faults", svg.y, bold=True)
    for i, f, lx, anchor in placed:
        y = svg.y + i * (LANE_H + LANE_GAP)
        title = f"{f.label}\n{rel(tl, f.start)}" + ("" if f.instant else f" .. {rel(tl, f.end)}")
        x = svg.x(f.start)
        svg.add(f'<g class="fault"><title>{esc(title)}</title>')
        if f.instant:
            svg.add(f'<path d="M{x:.1f},{y + 2} l5,7 l-5,7 l-5,-7 z" fill="{C_FAULT}" '
                    f'stroke="#8a6d00"/>')
        else:
            w = max(svg.x(f.end) - x, 1.5)
            svg.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{LANE_H}" '
                    f'fill="{C_FAULT}" rx="2"/>')
        svg.add(f'<text x="{lx:.1f}" y="{y + LANE_H - 5}" class="flbl" text-anchor="{anchor}">'
                f'{esc(f.label)}</text></g>')
    svg.y += len(rows) * (LANE_H + LANE_GAP) + GROUP_GAP


def _free(rows: list[list[tuple[float, float]]], r: int, k: int, a: float, b: float) -> bool:
    """Whether rows r..r+k-1 are free over a..b (a row missing is free)."""
    return all(x1 <= a or b <= x0 for row in rows[r:r + k] for x0, x1 in row)


def step_lines(svg: Svg, x: float, label: str, first_row: bool) -> tuple[list[str], str, float]:
    """A step's label as whole lines beside its marker at x: (lines, anchor, text x). After
    the marker when it fits, else before it (over the empty name column below the row's
    heading), else wrapped at words to the wider side."""
    after = WIDTH - 4 - (x + 11)
    before = (x - 11) - (svg.left if first_row else 8)
    if tw(label) <= after:
        return [label], "start", x + 11
    if tw(label) <= before:
        return [label], "end", x - 11
    side_after = after >= before
    room = max(int((after if side_after else before) / CHAR_W), 8)
    lines = textwrap.wrap(label, room, break_on_hyphens=False) or [label]
    return lines, ("start" if side_after else "end"), (x + 11 if side_after else x - 11)


def _steps(svg: Svg) -> None:
    """Numbered markers at their times, each with its whole label (wrapped at words when
    neither side of the marker has room), packed into rows so that none meet."""
    tl = svg.tl
    if not tl.steps:
        return
    rows: list[list[tuple[float, float]]] = [[(0, 8 + tw("scenario steps") + 4)]]
    placed = []
    for n, st in enumerate(tl.steps, 1):
        x = svg.x(st.start)
        r = 0
        while True:
            lines, anchor, lx = step_lines(svg, x, st.label, r == 0)
            w = max(tw(line) for line in lines)
            a, b = (x - 9, lx + w) if anchor == "start" else (lx - w, x + 9)
            if _free(rows, r, len(lines), a - 4, b + 8):
                break
            r += 1
        while len(rows) < r + len(lines):
            rows.append([])
        for k in range(len(lines)):
            rows[r + k].append((a - 4, b + 8))
        placed.append((r, n, st, x, lines, anchor, lx))
    svg.label("scenario steps", svg.y, bold=True)
    for r, n, st, x, lines, anchor, lx in placed:
        y = svg.y + r * (LANE_H + LANE_GAP)
        svg.add(f'<g class="step"><title>step {n} at {esc(rel(tl, st.start))}: {esc(st.label)}'
                f'</title><circle cx="{x:.1f}" cy="{y + LANE_H / 2}" r="7" fill="#555"/>'
                f'<text x="{x:.1f}" y="{y + LANE_H / 2 + 4}" class="vnum">{n}</text>')
        for k, line in enumerate(lines):
            svg.add(f'<text x="{lx:.1f}" y="{y + k * (LANE_H + LANE_GAP) + LANE_H - 5}" '
                    f'class="lbl" text-anchor="{anchor}">{esc(line)}</text>')
        svg.add("</g>")
    svg.y += len(rows) * (LANE_H + LANE_GAP) + GROUP_GAP - LANE_GAP


def call_colour(r: dict) -> str:
    if r.get("outcome") != "ok":
        return C_FAILED
    return C_TAKE if str(r.get("action", "")).startswith(RELEASES) else C_ADD


def _calls(svg: Svg) -> None:
    tl = svg.tl
    if not tl.calls:
        return
    svg.label("EC2 calls", svg.y, bold=True)
    svg.lane()
    for r in tl.calls:
        x = svg.x(r["time"])
        what = " ".join((r.get("ips") or []) + (r.get("prefixes") or []))
        title = (f"{r.get('action', '')} {r.get('eni_id') or ''} {what} -> {r.get('outcome')} "
                 f"at {rel(tl, r['time'])}")
        svg.add(f'<g class="call"><title>{esc(title)}</title><line x1="{x:.1f}" x2="{x:.1f}" '
                f'y1="{svg.y + 2}" y2="{svg.y + LANE_H - 2}" stroke="{call_colour(r)}" '
                f'stroke-width="2"/></g>')
    svg.y += LANE_H + GROUP_GAP


def eni_head(eni) -> str:
    where = ", ".join(x for x in (
        f"{eni.node}: {eni.instance_id}" if eni.node else eni.instance_id,
        f"device {eni.device_index}" if eni.device_index is not None else None) if x)
    return eni.eni_id + (f"  ({where})" if where else "")


def render_svg(tl: Timeline, violations: list[dict]) -> str:
    svg = Svg(tl)
    rows_start = TOP
    _faults(svg)
    _steps(svg)
    _calls(svg)
    for eni in tl.enis:
        svg.label(eni_head(eni), svg.y, bold=True, group="eni-head",
                  title=f"primary IP {eni.primary_ip}" if eni.primary_ip else "")
        svg.y += LANE_H
        ec2 = eni.ec2
        _lane(svg, "EC2", ec2, None, C_EC2, svg.y)
        svg.y += LANE_H + LANE_GAP
        _lane(svg, "IMDS served", eni.imds, ec2, C_IMDS, svg.y)
        svg.y += LANE_H + LANE_GAP
        _lane(svg, "daemon datastore", eni.daemon, ec2, C_DAEMON, svg.y)
        svg.y += LANE_H + GROUP_GAP

    if tl.pods:
        svg.label("pods", svg.y, bold=True)
        svg.y += LANE_H
    by_pod: dict[str, list[dict]] = {}
    for v in violations:
        pod = v.get("subject")
        if checker_of(v.get("kind") or "").subject_names == "ip":
            for p in (v.get("detail") or {}).get("pods") or []:
                by_pod.setdefault(p, []).append(v)
        else:
            by_pod.setdefault(pod, []).append(v)
    colors = {kind: c.colour for kind, c in CHECKERS.items() if c.colour}
    for p in tl.pods:
        svg.label(f"{p.name}  {p.ip}", svg.y, indent=14,
                  title=f"{p.name} on {p.instance_id} (node {p.node}), IP {p.ip}")
        svg.lane()
        svg.rect(p.start, p.end, svg.y, C_POD, f"{p.name} {p.ip} alive {rel(tl, p.start)} .. "
                 + (rel(tl, p.end) if p.deleted else "end"), "connected")
        # A violation whose checker has a lane word (a pod lost) fills the lane, drawn first;
        # the others are a strip along its bottom.
        for v in sorted(by_pod.get(p.name, []),
                        key=lambda v: checker_of(v.get("kind") or "").lane_word is None):
            until = v.get("until") or tl.t1
            kind = v.get("kind", "")
            word = checker_of(kind).lane_word
            h = LANE_H if word is not None else 5
            y = svg.y if word is not None else svg.y + LANE_H - 5
            svg.rect(v["since"], until, y, colors.get(kind, C_VIOLATION_DEFAULT),
                     f"{kind} {rel(tl, v['since'])} .. {rel(tl, v.get('until'))}",
                     word or "", h=h, cls="viol")
        svg.y += LANE_H + LANE_GAP
    _ip_stories(svg, violations)
    bottom = svg.y + 4

    # shading of fault spans behind everything (inserted first), axis and violation lines on top
    shade = []
    for f in tl.faults:
        if f.instant:
            continue
        x0, x1 = svg.x(f.start), svg.x(f.end)
        shade.append(f'<rect x="{x0:.1f}" y="{rows_start}" width="{max(x1 - x0, 1):.1f}" '
                     f'height="{bottom - rows_start}" class="shade"/>')
    axis = []
    step = _ticks(svg.span)
    k = 0
    while k * step <= svg.span + 1e-9:
        x = svg.x(tl.t0 + k * step)
        text = f"{k * step:g}s"
        # A tick label is centred on its line, but never runs out of the drawing.
        tx = min(max(x, tw(text) / 2), WIDTH - tw(text) / 2)
        axis.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{bottom}" class="grid"/>'
                    f'<text x="{tx:.1f}" y="{TOP - 10}" class="tick">{text}</text>')
        k += 1
    marks = []
    last_x, level = -100.0, 0
    for n, v in enumerate(violations, 1):
        x = svg.x(v["since"])
        level = level + 1 if x - last_x < 20 else 0
        last_x = x
        cy = int(bottom + 10 + 20 * (level % 3))
        title = f"#{n} {v.get('kind')} {v.get('subject')} at {rel(tl, v['since'])}"
        marks.append(f'<g class="vmark"><title>{esc(title)}</title>'
                     f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 4}" y2="{bottom}" stroke="{C_VIOL}" '
                     f'stroke-width="1.5" stroke-dasharray="5,3"/>'
                     f'<circle cx="{x:.1f}" cy="{cy}" r="9" fill="{C_VIOL}"/>'
                     f'<text x="{x:.1f}" y="{cy + 4}" class="vnum">{n}</text></g>')
    levels = max([0] + [int(m.split('cy="')[1].split('"')[0]) - bottom - 10 for m in marks]) if marks else 0
    height = bottom + 26 + levels
    width = WIDTH
    defs = ('<defs><pattern id="absent" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eee"/>'
            '<line x1="0" y1="0" x2="0" y2="6" stroke="#aaa" stroke-width="3"/></pattern></defs>')
    # No pixel size: the page scales the drawing to its width (CSS), its height follows.
    return (f'<svg class="timeline" width="100%" viewBox="0 0 {width} {height}" '
            f'preserveAspectRatio="xMinYMin meet" role="img">{defs}'
            + "".join(shade) + "".join(axis) + "".join(svg.parts) + "".join(marks) + "</svg>")


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px}
h3{font-size:14px;margin:12px 0 4px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600}
.holds{background:#2e7d32} .violation{background:#c62828} .error{background:#6d4c41}
.inconclusive{background:#8d6e00}
p.err{color:#6d4c41;font-weight:600}
.meta{color:#555} ul.summary li{margin:3px 0} ul.summary li.v{color:#b71c1c}
.legend span{display:inline-block;margin:0 14px 4px 0} .legend i{display:inline-block;width:14px;
height:12px;vertical-align:-1px;margin-right:5px;border-radius:2px}
svg.timeline{font:12px system-ui,Helvetica,Arial,sans-serif;background:#fff;width:100%;
height:auto;min-width:%(min)spx;max-width:%(max)spx;display:block}
@media (max-width:%(narrow)spx){body{margin:12px}}
svg .flbl{fill:#4a3b00;font-size:11px}
svg .lbl{fill:#222} svg .seg{fill:#222;font-size:11px;pointer-events:none}
svg .seg.on-dark{fill:#fff}
svg .lane{fill:#f6f6f6} svg .shade{fill:#edc948;opacity:.16} svg .grid{stroke:#ddd}
svg .tick{fill:#666;text-anchor:middle;font-size:11px}
svg .vnum{fill:#fff;text-anchor:middle;font-weight:700;font-size:11px}
svg .fault .seg,svg .absent .seg{fill:#4a3b00}
table{border-collapse:collapse;margin:4px 0} td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top;font-size:13px} th{background:#f3f3f3}
.scroll{overflow-x:auto} code{font-size:12px}
table.chain td{border:0;border-bottom:1px solid #eee;padding:2px 8px 2px 0}
.at{color:#555;white-space:nowrap;font-variant-numeric:tabular-nums}
.tag{font-size:11px;font-weight:600;text-transform:uppercase;white-space:nowrap;color:#555} .tag.fault{color:#8a6d00} .tag.imds{color:#3b7d32} .tag.daemon{color:#6a4c93}
.tag.ec2-call,.tag.ec2{color:#2f5d8a} .tag.symptom{color:#b71c1c}
p.root{font-size:15px;border-left:4px solid #c62828;padding:6px 10px;background:#fdf3f3;margin:10px 0}
dl.terms{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:4px 0}
dl.terms dt{font-weight:600} dl.terms dd{margin:0}
""".replace("%(min)s", str(WIDTH)).replace("%(max)s", str(round(WIDTH * MAX_ZOOM))).replace(
    "%(narrow)s", str(WIDTH + 2 * 20 + 60))


def legend_rows() -> list[tuple[str, str]]:
    """(colour, words) of the chart's legend: the kit's own (LEGEND), each checker that
    declares a colour (Checker.colour, Checker.legend) in the order runs step them, and the
    violation marker."""
    checkers = [(c.colour, c.legend or kind) for kind, c in in_order() if c.colour]
    return LEGEND + checkers + [(C_VIOL, "violation (numbered)")]


LEGEND = [
    (C_EC2, "EC2 (DescribeNetworkInterfaces: the truth)"),
    (C_IMDS, "IMDS served, same IPs as EC2"),
    (C_DAEMON, "daemon datastore, same IPs as EC2"),
    (C_DIFF, "differs from EC2 (+ extra, \u2212 missing)"),
    ("repeating-linear-gradient(45deg,#aaa 0 3px,#eee 3px 6px)", "absent (MAC not served / daemon down)"),
    (C_FAULT, "fault (also shaded through the chart)"),
    (C_ADD, "EC2 call that adds (Assign, Attach, Create)"),
    (C_TAKE, "EC2 call that takes away (Unassign, Detach, Delete)"),
    (C_FAILED, "EC2 call refused or failed"),
    (C_HOLDER, "pod using the IP"),
    (C_POD, "pod connected"),
]


def render(doc: dict, tl: Timeline) -> str:
    verdict = doc.get("verdict", "?")
    violations = doc.get("violations") or []
    title = f"cnikit report: {doc.get('scenario') or 'run'} / {doc.get('profile') or '?'}"
    meta = (f"seed {esc(doc.get('seed'))} \u00b7 {tl.t1 - tl.t0:.1f}s recorded"
            + (f" \u00b7 run took {doc['seconds']:.1f}s" if isinstance(doc.get("seconds"), (int, float)) else "")
            + f" \u00b7 {len(tl.pods)} pods \u00b7 {len(tl.enis)} ENIs \u00b7 {len(tl.faults)} faults")
    groups = chain_groups(violations)
    letter = {n: g["name"] for g in groups for n in g["violations"]}
    summary = "".join(
        f'<li class="{"v" if n < len(violations) else ""}">'
        + (f"<b>#{n + 1}</b> " if n < len(violations) else "")
        + esc(line.split("; root cause: ")[0])
        + (f' <a href="#cause-{letter[n + 1]}">(root cause: chain {letter[n + 1]})</a>'
           if n + 1 in letter else "") + "</li>"
        for n, line in enumerate(doc.get("summary") or []))
    legend = "".join(f'<span><i style="background:{c}"></i>{esc(t)}</span>'
                     for c, t in legend_rows())
    vrows = "".join(
        f"<tr><td>{n}</td><td>{esc(v.get('kind'))}</td><td>{esc(v.get('subject'))}</td>"
        f"<td>{esc(rel(tl, v.get('since')))}</td><td>{esc(rel(tl, v.get('until')))}</td>"
        f"<td><code>{esc(_compact(v.get('detail')))}</code></td></tr>"
        for n, v in enumerate(violations, 1))
    frows = "".join(
        f"<tr><td>{esc(f.source)}</td><td>{esc(f.label)}</td><td>{esc(rel(tl, f.start))}</td>"
        f"<td>{esc('' if f.instant else rel(tl, f.end))}</td></tr>" for f in tl.faults)
    srows = "".join(
        f"<tr><td>{n}</td><td>{esc(rel(tl, st.start))}</td><td>{esc(st.label)}</td></tr>"
        for n, st in enumerate(tl.steps, 1))
    crows = "".join(
        f"<tr><td>{esc(' + '.join(c['faults']))}</td><td>{_seconds(c['seconds'])}</td>"
        f"<td>{c['times']}</td></tr>"
        for c in ((doc.get("coverage") or {}).get("pairs") or []))
    families = ", ".join(f"{esc(k)} {_seconds(v)}" for k, v in
                         ((doc.get("coverage") or {}).get("families") or {}).items())
    error = (f'<p class="err">the run stopped with an error: {esc(doc["error"])}</p>'
             if doc.get("error") else "")
    versions = " \u00b7 ".join(f"{esc(k)} {esc(v)}" for k, v in (doc.get("versions") or {}).items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{CSS}</style></head><body>
<h1>{esc(title)} <span class="verdict {esc(verdict)}">{esc(verdict)}</span></h1>
<div class="meta">{meta}</div>
{f'<p>{esc(doc["description"])}</p>' if doc.get("description") else ""}{error}
{_root(doc)}
<h2>Summary</h2><ul class="summary">{summary}</ul>
{_causes(tl, groups)}
{_terms(doc, tl)}
<h2>Timeline</h2>
<div class="legend">{legend}</div>
<p class="meta">Per ENI: its secondary IPs and prefixes as each view saw them (the ENI's own
primary IP left out). A number is the count; hover a segment for its IPs. Times are seconds
from the first record.</p>
<div class="scroll">{render_svg(tl, violations)}</div>
<h2>Violations</h2>
{f'<table><tr><th>#</th><th>kind</th><th>subject</th><th>since</th><th>until</th><th>detail</th></tr>{vrows}</table>' if vrows else '<p>none</p>'}
{f'<h2>Scenario steps</h2><table><tr><th>#</th><th>at</th><th>step</th></tr>{srows}</table>' if srows else ''}
<h2>Faults</h2>
{f'<table><tr><th>source</th><th>fault</th><th>from</th><th>to</th></tr>{frows}</table>' if frows else '<p>none</p>'}
{f'<h2>Fault combinations</h2><p class="meta">Faults in effect at once: for how many seconds they overlapped and how many times they met. An instant act (EC2 moving an address) meets whatever was in effect at that moment and lasts no time: "instant". By family: {families or "none"}.</p><table><tr><th>faults</th><th>seconds</th><th>times</th></tr>{crows}</table>' if crows else ''}
<p class="meta">{versions}</p>
</body></html>
"""


# What a detail without a value means, where "none" alone would leave the reader guessing.
UNSET = {"held_by": "no instance (EC2 gives the address to none)"}


def _compact(d) -> str:
    """A violation's detail as "key: value" pairs, values as a person reads them."""
    if not d:
        return ""
    return " \u00b7 ".join(
        f"{str(k).replace('_', ' ')}: {UNSET.get(k, 'none') if v is None else fmt(v)}"
        for k, v in d.items())


def _seconds(s: float) -> str:
    return "instant" if s == 0 else f"{s:.2f}s"


def _root(doc: dict) -> str:
    """The root cause in plain words, first thing under the title."""
    causes = doc.get("root_cause") or []
    out = []
    for rc in causes:
        where = ", ".join(f'<a href="#cause-{esc(c)}">chain {esc(c)}</a>' for c in rc["chains"])
        if len(causes) > 1:
            nums = ", ".join(f"#{n}" for n in rc["violations"])
            where = f"violations {nums}" + (f"; {where}" if where else "")
        out.append(f'<p class="root"><b>Root cause:</b> {esc(rc["text"])}.'
                   + (f' <span class="meta">({where})</span>' if where else "") + "</p>")
    return "\n".join(out)


# Terms the page uses, each explained once (only those the page shows).
TERMS = [
    ("ENI", "elastic network interface: a network card EC2 attaches to an instance; it holds "
            "the instance's private addresses, one primary and any number of secondary ones"),
    ("IMDS", "instance metadata service: what a node reads about itself, its ENIs and their "
             "addresses; it follows EC2 with a delay, and a scenario may fault it"),
    ("local-ipv4s", "the IMDS entry listing an ENI's private IPv4 addresses "
                    "(network/interfaces/macs/<mac>/local-ipv4s), its primary one included"),
    ("datastore", "the daemon's own record of the addresses it holds on each ENI and which "
                  "pod has each; an address it drops from there is free to give another pod"),
    ("warm pool", "addresses the daemon holds on its ENIs before any pod asks, so that a new "
                  "pod gets one at once"),
    ("reconcile", "the daemon's periodic comparison of its datastore with IMDS (and EC2), "
                  "adding and dropping addresses to match"),
]


def _terms(doc: dict, tl: Timeline) -> str:
    said = " ".join([*(doc.get("summary") or []), *(rc["text"] for rc in doc.get("root_cause") or []),
                     *(st.label for st in tl.steps), *(f.label for f in tl.faults),
                     *(x["text"] for v in doc.get("violations") or [] for x in v.get("chain") or []),
                     "ENI IMDS datastore"])  # the chart's lanes name these three
    rows = "".join(f"<dt>{esc(t)}</dt><dd>{esc(d)}</dd>" for t, d in TERMS if t in said)
    return f'<h2>Terms</h2><dl class="terms">{rows}</dl>' if rows else ""


def _causes(tl: Timeline, groups: list[dict]) -> str:
    if not groups:
        return ""

    def row(x: dict, first: str = "") -> str:
        at = rel(tl, x["time"]) if x.get("time") is not None else ""
        text = x["text"].removeprefix("fault: ")
        return (f'<tr><td class="at">{esc(at)}</td><td class="tag {esc(x["step"])}">'
                f'{esc(x["step"].replace("-", " "))}</td><td>{first}{esc(text)}</td></tr>')

    out = ['<h2>Root cause</h2><p class="meta">Each chain runs from the first cause the record '
           'shows to the violations it explains, built from the record alone: the faults, what '
           'IMDS served the node, what its daemon did (with its own log of decisions when the '
           'build keeps one), what EC2 did, what the checkers saw.</p>']
    for g in groups:
        nums = ", ".join(f"#{n}" for n in g["violations"])
        rows = [row(x) for x in g["links"]]
        # EC2's reaction once per address, then each violation's symptom.
        reactions: dict[tuple, list[int]] = {}
        for n, links in g["ends"]:
            for x in links:
                if x["step"] == "ec2":
                    reactions.setdefault((x["time"], x["text"]), []).append(n)
        for (t, text), ns in sorted(reactions.items()):
            rows.append(row({"step": "ec2", "time": t,
                             "text": f"{text} ({', '.join(f'#{n}' for n in ns)})"}))
        for n, links in sorted(g["ends"], key=lambda e: [x["time"] for x in e[1]][-1:]):
            rows += [row(x, f"<b>#{n}</b> ") for x in links if x["step"] == "symptom"]
        out.append(f'<h3 id="cause-{g["name"]}">Chain {g["name"]}: violations {nums}</h3>'
                   f'<table class="chain">{"".join(rows)}</table>')
    return "\n".join(out)
