"""The timeline drawing's primitives (cnikit.report.chart draws with them): its units, and
Svg, which maps a time to x and draws a lane, a label and a labelled segment.
"""

from __future__ import annotations

import html

from cnikit.report.timeline import Timeline

# The drawing's own units are CSS pixels: it is never drawn smaller than its width (so its
# smallest font, 11px, stays 11px), and scales up to MAX_ZOOM, no further (fonts past ~15px
# read as shouting). It is drawn at each of WIDTHS and the page shows the one its window
# fits: WIDTH fits a 900px window beside the page's margins; WIDE takes over where WIDTH at
# MAX_ZOOM would leave the window's right side empty (1400px: 22% empty at WIDTH alone).
WIDTH, WIDE, RIGHT = 840, 1090, 20
WIDTHS = (WIDTH, WIDE)
MAX_ZOOM = 1.3
LABEL_MIN, LABEL_MAX = 150, 340  # the lane-name column, fitted to its longest name
LANE_H, LANE_GAP, GROUP_GAP = 18, 3, 12
TOP = 34
CHAR_W = 7.2  # the widest average glyph of the 12px font: labels are packed by it
SMALL_W = CHAR_W * 11 / 12  # the same for the 11px font of fault and segment labels


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def tw(text: str, char_w: float = CHAR_W) -> float:
    return len(text) * char_w


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


class Svg:
    def __init__(self, tl: Timeline, width: float = WIDTH):
        self.tl = tl
        self.width = width
        self.parts: list[str] = []
        self.y = TOP
        self.span = max(tl.t1 - tl.t0, 1e-3)
        self.left = label_width(tl)  # where the plot (its time axis) starts
        self.right = width - RIGHT
        self.plot_w = self.right - self.left
        # x of each violation's line through the lanes: a label inside a lane keeps off them
        self.lines: list[float] = []

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

    def beside(self, x0: float, x1: float, text: str,
               mark_left: float | None = None) -> tuple[float, str, float, float]:
        """Where an 11px label for a mark spanning x0..x1 (drawn from mark_left, x0 if not
        given) goes, inside the axis: after x0, else ending just before the mark, else
        ending at the axis's end. (x, anchor, left, right)."""
        w = tw(text, SMALL_W)
        mark_left = x0 if mark_left is None else mark_left
        if x0 + 4 + w <= self.right:
            return x0 + 4, "start", mark_left, max(x1, x0 + 4 + w)
        if mark_left - 4 - w >= self.left:
            return mark_left - 4, "end", mark_left - 4 - w, x1
        return self.right, "end", max(min(x0, self.right - w), self.left), self.right

    def clear_of_lines(self, x: float, w: float, x1: float) -> float | None:
        """Where a label w wide, wanted at x, starts so that no violation line crosses it
        and it ends before x1; None when there is no such place."""
        for line in sorted(self.lines):
            if x - 3 <= line <= x + w + 3:
                x = line + 4
        return x if x + w <= x1 and not any(x - 3 <= ln <= x + w + 3 for ln in self.lines) \
            else None

    def rect(self, t0: float, t1: float, y: float, fill: str, title: str = "", text: str = "",
             h: float = LANE_H, cls: str = "") -> None:
        x0, x1 = self.x(t0), self.x(t1)
        w = max(x1 - x0, 1.5)
        c = f' class="{cls}"' if cls else ""
        tt = f"<title>{esc(title)}</title>" if title else ""
        self.add(f'<g{c}><rect x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" '
                 f'fill="{fill}" rx="2">{tt}</rect>')
        # The label where it fits whole, off the violation lines; else the set's count
        # alone; else none (the hover has it all).
        for said in dict.fromkeys((text, text.split(" ", 1)[0])) if text else ():
            tx = self.clear_of_lines(x0 + 4, tw(said, SMALL_W), x0 + w - 2)
            if tx is not None:
                cls = "seg on-dark" if dark(fill) else "seg"
                self.add(f'<text x="{tx:.1f}" y="{y + h - 5:.1f}" class="{cls}">{tt}'
                         f'{esc(said)}</text>')
                break
        self.add("</g>")
