"""The timeline's colours and the rule that keeps them apart.

The report (cnikit.report.legend) draws the kit's own meanings in the colours below, and a
checker's violations in the colour it declares (Checker.colour). A checker's colour is
checked when it registers: one too close to a colour in use is refused there, naming the
colour it is too close to, rather than found later on a chart where two meanings look alike.

Closeness is CIEDE2000 (the CIE's colour difference, which follows what eyes tell apart:
steel blue and navy differ a lot in RGB and little to a reader). Below MIN_DISTANCE two
colours are confused on a 5px strip along a pod's lane; the kit's palette keeps 18.7 at the
least (EC2's blue against the datastore's purple), so a checker has room.
"""

from __future__ import annotations

import itertools
import math

from cnikit.errors import UsageError

MIN_DISTANCE = 15.0

C_EC2, C_IMDS, C_DAEMON, C_DIFF = "#4e79a7", "#59a14f", "#8c6bb1", "#f28e2b"
C_POD = "#c9d6c2"
# A violation on a pod's lane is drawn in its checker's colour; one whose checker declares
# none is drawn dark, as a lost pod is (the reachability checker's own colour).
C_VIOLATION_DEFAULT = "#3d3d3d"
C_FAULT, C_VIOL = "#edc948", "#d62728"
C_HOLDER, C_FAILED = "#d4b5e3", "#999999"
C_ADD, C_TAKE = "#17becf", "#6f412a"

# colour -> what it means on the chart (the legend's words are cnikit.report.legend's)
KIT = {C_EC2: "EC2", C_IMDS: "IMDS served", C_DAEMON: "daemon datastore",
       C_DIFF: "differs from EC2", C_POD: "pod connected", C_FAULT: "fault",
       C_VIOL: "violation", C_HOLDER: "pod using the IP", C_FAILED: "EC2 call refused",
       C_ADD: "EC2 call that adds", C_TAKE: "EC2 call that takes away"}

class ColourClash(UsageError):
    """A colour too close to one the timeline already uses (one line)."""


def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of "#rrggbb"."""
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
           0.2126 * r + 0.7152 * g + 0.0722 * b,
           (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def distance(a: str, b: str) -> float:
    """CIEDE2000 difference of two "#rrggbb" colours (0: the same; 100: black and white)."""
    (l1, a1, b1), (l2, a2, b2) = _lab(a), _lab(b)
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1, a2 = a1 * (1 + g), a2 * (1 + g)
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = (math.degrees(math.atan2(y, x)) % 360 for x, y in ((a1, b1), (a2, b2)))
    dh = h2 - h1 if abs(h2 - h1) <= 180 else h2 - h1 - 360 if h2 > h1 else h2 - h1 + 360
    dh = 0 if c1 * c2 == 0 else dh
    d_big_h = 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    l_mean, c_mean = (l1 + l2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        h_mean = h1 + h2
    elif abs(h1 - h2) <= 180:
        h_mean = (h1 + h2) / 2
    else:
        h_mean = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_mean - 30)) + 0.24 * math.cos(math.radians(2 * h_mean))
         + 0.32 * math.cos(math.radians(3 * h_mean + 6)) - 0.20 * math.cos(math.radians(4 * h_mean - 63)))
    rot = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * c_mean, 1 + 0.015 * c_mean * t
    r_t = -math.sin(math.radians(2 * rot)) * r_c
    dl, dc, dhh = (l2 - l1) / s_l, (c2 - c1) / s_c, d_big_h / s_h
    return math.sqrt(dl ** 2 + dc ** 2 + dhh ** 2 + r_t * dc * dhh)


def _valid(colour: str) -> bool:
    return (isinstance(colour, str) and len(colour) == 7 and colour[0] == "#"
            and all(c in "0123456789abcdefABCDEF" for c in colour[1:]))


def check(colour: str, owner: str, others: dict[str, str]) -> None:
    """Whether `owner` (how errors name it: "checker 'shared-ip'") may draw in `colour`,
    beside the kit's colours and `others` (colour -> owner): ColourClash, one line, when it
    is not "#rrggbb" or is closer than MIN_DISTANCE to one of them."""
    if not _valid(colour):
        raise ColourClash(f"{owner}: colour {colour!r} is not of the form #rrggbb")
    for other, who in {**KIT, **others}.items():
        d = distance(colour.lower(), other.lower())
        if d < MIN_DISTANCE:
            raise ColourClash(
                f"{owner}: colour {colour} is too close to {other} ({who}) to tell apart on "
                f"the timeline (difference {d:.1f}, at least {MIN_DISTANCE:g} needed); pick "
                f"another (cnikit/check/palette.py has the colours in use)")


def closest_pair(colours) -> tuple[float, str, str]:
    """(difference, a, b): the two of `colours` that are hardest to tell apart."""
    return min((distance(a, b), a, b) for a, b in itertools.combinations(colours, 2))
