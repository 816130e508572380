"""The timeline chart of report.html: one inline SVG, drawn with cnikit.report.svg in the
colours of cnikit.report.legend.

Chart rows: faults (labelled bars, packed so that no two labels meet; each also shades the
whole chart), the scenario's numbered steps, EC2 calls (ticks), per ENI the three views of its
IPs, one lane per pod, then per IP a violation names its holders in each view. Violations are
numbered red lines through the lanes (below the fault and step labels), and a label inside a
lane moves off them or is left to the hover. Every label stays inside the time axis.
Hovering a segment shows its IPs (SVG <title>). The SVG has no pixel size: it scales to the
page's width, from the width it is drawn for (cnikit.report.svg.WIDTHS).
"""

from __future__ import annotations

import math
import textwrap

from cnikit.check.checkers import CHECKERS, checker_of
from cnikit.report.legend import (
    C_DAEMON,
    C_DIFF,
    C_EC2,
    C_FAULT,
    C_HOLDER,
    C_IMDS,
    C_POD,
    C_VIOL,
    C_VIOLATION_DEFAULT,
    call_colour,
)
from cnikit.report.svg import CHAR_W, GROUP_GAP, LANE_GAP, LANE_H, TOP, WIDTH, Svg, esc, tw
from cnikit.report.timeline import Segment, Timeline, sorted_ips, value_at
from cnikit.report.words import rel, short


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
        if f.instant:  # a diamond 10 wide centred on its time
            lx, anchor, left, right = svg.beside(x0 + 7, x1, f.label, mark_left=x0 - 5)
        else:
            lx, anchor, left, right = svg.beside(x0, x1, f.label)
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


def step_lines(svg: Svg, x: float, label: str) -> tuple[list[str], str, float]:
    """A step's label as whole lines beside its marker at x, inside the time axis: (lines,
    anchor, text x). After the marker when it fits, else before it, else wrapped at words to
    the wider side."""
    after = svg.right - (x + 11)
    before = (x - 11) - svg.left
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
        lines, anchor, lx = step_lines(svg, x, st.label)
        w = max(tw(line) for line in lines)
        a, b = (x - 9, lx + w) if anchor == "start" else (lx - w, x + 9)
        r = 0
        while not _free(rows, r, len(lines), a - 4, b + 8):
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


def render_svg(tl: Timeline, violations: list[dict], width: float = WIDTH) -> str:
    svg = Svg(tl, width)
    rows_start = TOP
    svg.lines = [svg.x(v["since"]) for v in violations]
    _faults(svg)
    _steps(svg)
    # Violation lines run through the lanes below, not through the fault and step labels.
    lines_top = svg.y - 4
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
        tx = min(max(x, tw(text) / 2), svg.width - tw(text) / 2)
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
                     f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{lines_top}" y2="{bottom}" stroke="{C_VIOL}" '
                     f'stroke-width="1.5" stroke-dasharray="5,3"/>'
                     f'<circle cx="{x:.1f}" cy="{cy}" r="9" fill="{C_VIOL}"/>'
                     f'<text x="{x:.1f}" y="{cy + 4}" class="vnum">{n}</text></g>')
    levels = max([0] + [int(m.split('cy="')[1].split('"')[0]) - bottom - 10 for m in marks]) if marks else 0
    height = bottom + 26 + levels
    width = svg.width
    defs = ('<defs><pattern id="absent" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eee"/>'
            '<line x1="0" y1="0" x2="0" y2="6" stroke="#aaa" stroke-width="3"/></pattern></defs>')
    # No pixel size: the page scales the drawing to its width (CSS), its height follows.
    return (f'<svg class="timeline w{width:g}" width="100%" viewBox="0 0 {width} {height}" '
            f'preserveAspectRatio="xMinYMin meet" role="img">{defs}'
            + "".join(shade) + "".join(axis) + "".join(svg.parts) + "".join(marks) + "</svg>")
