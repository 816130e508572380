"""What each colour of the timeline means: the colours, the colour of an EC2 call, and the
legend the page shows above the chart (the kit's own rows, then each checker's).
"""

from __future__ import annotations

from cnikit.check.checkers import in_order
from cnikit.check.palette import (  # noqa: F401  (re-exported: the chart reads them here)
    C_ADD,
    C_DAEMON,
    C_DIFF,
    C_EC2,
    C_FAILED,
    C_FAULT,
    C_HOLDER,
    C_IMDS,
    C_POD,
    C_TAKE,
    C_VIOL,
    C_VIOLATION_DEFAULT,
)

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
