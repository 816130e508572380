"""The daemon's settings: upstream's defaults, the time scale, and bad values refused in one
line."""

from __future__ import annotations

import pytest

from cnikit.daemon.config import from_env
from cnikit.errors import UsageError


def test_config_defaults_are_upstreams_and_scale():
    cfg = from_env({"CNIKIT_TIME_SCALE": "0.1"})
    assert (cfg.warm_eni_target, cfg.warm_ip_target, cfg.minimum_ip_target) == (1, 0, 0)
    assert cfg.profile == "hardened" and cfg.imds_endpoint == "http://169.254.169.254"
    assert cfg.pool_interval == pytest.approx(0.5) and cfg.reconcile_interval == pytest.approx(6)
    assert cfg.decrease_interval == pytest.approx(3) and cfg.ip_cooldown_scaled == pytest.approx(3)


@pytest.mark.parametrize("env,msg", [
    ({"WARM_IP_TARGET": "x"}, "WARM_IP_TARGET"),
    ({"CNIKIT_PROFILE": "nope"}, "CNIKIT_PROFILE"),
    ({"ENABLE_PREFIX_DELEGATION": "maybe"}, "ENABLE_PREFIX_DELEGATION"),
    ({"MAX_ENI": "0"}, "MAX_ENI"),
])
def test_config_rejects_bad_values_in_one_line(env, msg):
    with pytest.raises(UsageError) as e:
        from_env(env)
    assert msg in str(e.value) and "\n" not in str(e.value)
