"""What each colour of the timeline means: the colours, the colour of an EC2 call, and the
legend the page shows above the chart (the kit's own rows, then each checker's).
"""

from __future__ import annotations

from cnikit.check.checkers import in_order

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


def call_colour(r: dict) -> str:
    if r.get("outcome") != "ok":
        return C_FAILED
    return C_TAKE if str(r.get("action", "")).startswith(RELEASES) else C_ADD


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
