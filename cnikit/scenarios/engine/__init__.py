"""The run engine: a live cluster, the watch (prober, monitor, checkers), a scenario's
clients and nemesis, and the verdict the checkers reach.

A scenario only acts and waits (on conditions, with deadlines); it never decides the
verdict. Every action lands in the history, next to what the prober and the monitor saw.

    registry   @scenario, Scenario, REGISTRY
    outcomes   how a scenario ends early: Precondition, TooSlow, NotExposed, Liveness, ...
    ctx        Ctx, the scenario's API, in mixins by concern: waits (time, waits,
               narration), pods (clients), nemesis (faults, kills), observe (the build
               from outside, EC2)
    sampler    DaemonSampler: each node's daemon watched from outside
    run        run_scenario (RunOptions: how a run is made): start, watch, play, judge,
               report; collect (what the report reads from the parts) and verdict
    result     RunResult and its evidence lines
"""

from cnikit.scenarios.engine.ctx import Ctx
from cnikit.scenarios.engine.observe import NodeReads
from cnikit.scenarios.engine.outcomes import (
    SCENARIO,
    Liveness,
    NotExposed,
    Precondition,
    ScenarioFailed,
    TooSlow,
    liveness_record,
)
from cnikit.scenarios.engine.registry import REGISTRY, Scenario, Subnets, scenario
from cnikit.scenarios.engine.result import RunResult
from cnikit.scenarios.engine.run import (
    BASE_ENV,
    DEFAULT_SCALE,
    STRICT_LEAKS_ENV,
    RunOptions,
    check_profile,
    make_cluster,
    run_scenario,
    write_report,
)
from cnikit.scenarios.engine.sampler import DaemonSampler

__all__ = ["BASE_ENV", "DEFAULT_SCALE", "REGISTRY", "SCENARIO", "STRICT_LEAKS_ENV", "Ctx",
           "DaemonSampler", "Liveness", "NodeReads", "NotExposed", "Precondition",
           "RunOptions", "RunResult", "Scenario", "ScenarioFailed", "Subnets", "TooSlow",
           "check_profile", "liveness_record", "make_cluster", "run_scenario", "scenario", "write_report"]
