"""stale-imds-lagging-describe stages a race: a reconcile pass between the release's cooldown
ending and Describe catching up. A machine that held the build's passes back is too slow
(inconclusive), never a false `holds`; a build that reconciles rarely or never is judged as
it is."""

from __future__ import annotations

import pytest

from cnikit.scenarios.engine import TooSlow
from cnikit.scenarios.stale_imds_lagging_describe import staged


class Passes:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return len(self.times)


def test_no_pass_in_the_window_of_a_build_that_passes_often_is_too_slow():
    with pytest.raises(TooSlow, match="no reconcile pass"):
        staged(Passes([1, 4, 7, 10, 19, 22]), 11.0, 16.0)


def test_a_pass_in_the_window_or_a_rare_or_no_reconcile_is_judged_as_it_is():
    staged(Passes([1, 4, 7, 10, 13, 16]), 11.0, 16.0)  # a pass at 13
    staged(Passes([1, 11, 21]), 11.5, 16.0)  # every 10 s: the window is shorter
    staged(Passes([]), 11.0, 16.0)  # never reads IMDS
