"""What a matrix cell asserts beyond its verdict.

test_matrix runs every scenario on every built-in profile. A test that wants a closer look
at one of those runs registers a check here instead of running the scenario again: each
run is 10-30 s of a CI runner, and the matrix cell is the same run (same scenario, build and
seed). A check is a function of the run's result and of what its `during` hook (called at
every step of the live run, with the scenario's Ctx) kept in `seen`.

Checks run for the built-in profiles they name (all by default), at seed 1, the seed they
were written against; with `--cnikit-target FILE` the matrix runs a build of the user's and
none of these apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cnikit.targets import builtin_names


@dataclass(frozen=True)
class CellCheck:
    name: str
    scenario: str
    after: Callable[[object, dict], None]  # (RunResult, seen)
    during: Callable[[object, dict], None] | None = None  # (Ctx, seen), at every step
    profiles: tuple[str, ...] = ()  # () = every built-in profile


SEED = 1  # the seed the checks were written against


CHECKS: list[CellCheck] = []


def check(scenario: str, profiles: tuple[str, ...] = (), during=None):
    """Register the decorated function as a check of `scenario`'s cells."""
    def register(fn):
        CHECKS.append(CellCheck(fn.__name__, scenario, fn, during, profiles))
        return fn
    return register


def for_cell(scenario: str, build: str, seed: int) -> list[CellCheck]:
    if seed != SEED:
        return []
    return [c for c in CHECKS if c.scenario == scenario
            and build in (c.profiles or builtin_names())]


# -- ip-reuse-cooldown (upstream 1091) ------------------------------------------------------------

@check("ip-reuse-cooldown")
def the_cooldown_check_was_armed(r, seen) -> None:
    """Every profile keeps IP_COOLDOWN_PERIOD and holds; the lingering flows were there to
    be reached (the check was armed, not idle). A build without the cooldown fails:
    tests/scenarios/test_reuse.py."""
    ghosts = sum((e["value"] or {}).get("ghost_sent", 0) for e in r.history
                 if e["f"] == "stats")
    assert ghosts > 0
    assert not [e for e in r.history if e["f"] == "stale"]


# -- ec2-takes-held-address: the nemesis's own damage told apart from the build's ---------------

@check("ec2-takes-held-address", profiles=("hardened",))
def a_pod_whose_address_the_nemesis_took_is_excused_only_while_it_is_taken(r, seen) -> None:
    import json

    excused = [w for w in r.warnings if w["kind"] == "nemesis-damage"]
    # The victim went dark (the prober saw it) while its address was elsewhere ...
    assert {w["detail"]["excused"] for w in excused} >= {"unreachable", "ip-not-owned"}
    takes = {e["value"]["id"]: e for e in r.history
             if e["process"] == "nemesis" and e["f"] == "ec2-take-held" and e["type"] == "start"}
    for w in excused:  # ... and each excuse lies within its take's window
        assert takes[w["detail"]["nemesis"]]["time"] <= w["since"]
    with open(r.report["json"]) as f:
        doc = json.load(f)
    assert "address taken" in doc["coverage"]["classes"]


# -- daemon-crash-churn: the verdicts need no private API of the reference daemon ---------------

def _ask_private_status(ctx, seen: dict) -> None:
    if "status" not in seen:
        seen["status"] = ctx.cluster.status(0)


@check("daemon-crash-churn", profiles=("hardened",), during=_ask_private_status)
def the_private_status_api_is_off(r, seen) -> None:
    """The matrix proves the verdicts hold without the reference daemon's private status
    API: this proves it really is off in those runs."""
    answer = seen.get("status")
    assert answer and answer["ok"] is False, answer
    assert "CNIKIT_PRIVATE_STATUS=off" in answer["error"]
    # What the kit saw instead: the datastore through the declared introspection port
    # (upstream's /v1/enis), and every node's reconcile reads in the IMDS request log.
    assert all("ENIs" in view for view in r.daemon_views.values()), r.daemon_views
    assert any(e["f"] == "daemon-view" for e in r.history)
    iids = {n["instance_id"] for n in r.nodes}
    assert {q["instance_id"] for q in r.imds_requests} == iids


# -- runtime-retries: every retry of the runtime ran and was answered as the spec wants --------

@check("runtime-retries")
def every_retry_of_the_runtime_was_made(r, seen) -> None:
    """Each kind of retry is in the history, the ones the spec judges answered success (or,
    for a repeated ADD, the same address), and the replayed DEL came after its address went
    to a new pod, which kept it."""
    ops = [e for e in r.history if e["process"] == "client" and e["f"] == "cni-retry"]
    kinds = {e["value"]["op"] for e in ops}
    assert kinds >= {"add-repeat", "del-empty-netns", "del-replayed", "del-daemon-down",
                     "del-given-up"}, kinds
    for e in ops:
        v = e["value"]
        if v["op"] == "add-repeat":
            assert e["type"] == "ok" and v["answer"] == v["ip"], e
        elif v["op"] in ("del-empty-netns", "del-replayed", "del-after-restart"):
            assert e["type"] == "ok", e
    assert any(e["value"]["op"] == "del-replayed" and e["value"]["held_by"] for e in ops), ops
