"""run_scenario's settings (RunOptions): keywords override the options they are given with,
and a setting no run can take is refused in one line before anything starts."""

from __future__ import annotations

import pytest

from cnikit import scenarios
from cnikit.errors import UsageError
from cnikit.scenarios.engine import RunOptions, run_scenario


def test_a_keyword_overrides_the_options_given():
    sc = scenarios.get("imds-outage")
    with pytest.raises(UsageError, match=r"^--ec2 must be moto or localstack, not 'aws'$"):
        run_scenario(sc, "hardened", options=RunOptions(ec2="moto"), ec2="aws")


def test_a_duration_no_run_can_take_is_refused():
    sc = scenarios.get("imds-outage")
    with pytest.raises(UsageError, match=r"^--duration must be positive, got -1$"):
        run_scenario(sc, "hardened", options=RunOptions(duration=-1))


def test_an_unknown_setting_is_refused():
    with pytest.raises(TypeError, match="slowest"):
        run_scenario(scenarios.get("imds-outage"), "hardened", slowest=(2.0,))
