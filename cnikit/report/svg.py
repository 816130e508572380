"""The timeline drawing's primitives (cnikit.report.chart draws with them): its units, and
Svg, which maps a time to x and draws a lane, a label and a labelled segment.
"""

from __future__ import annotations

import html

from cnikit.report.timeline import Timeline

# The drawing's own units are CSS pixels: it is never drawn smaller than WIDTH (so its
# smallest font, 11px, stays 11px), and fits a 900px window beside the page's margins.
# Wider windows scale it up to MAX_ZOOM, no further (fonts past ~15px read as shouting).
WIDTH, RIGHT = 840, 20
MAX_ZOOM = 1.3
LABEL_MIN, LABEL_MAX = 150, 340  # the lane-name column, fitted to its longest name
LANE_H, LANE_GAP, GROUP_GAP = 18, 3, 12
TOP = 34
CHAR_W = 7.2  # the widest average glyph of the 12px font: labels are packed by it


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
