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

from cnikit.cloud.audit import OTHER_PRINCIPAL_KEY
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


# -- restart-storm-throttled (upstream 873/617) ---------------------------------------------------

@check("restart-storm-throttled")
@check("ipv6-start-throttled")
def every_daemon_met_the_account_limit_at_once(r, seen) -> None:
    """The storm was real: every node's daemon was killed before any was started again, and
    the account's one bucket refused some of the build's calls (the exposure counts them)."""
    nem = [e for e in r.history if e["process"] == "nemesis"]
    kills = [e for e in nem if e["f"] == "daemon-kill" and e["type"] == "start"]
    assert len(kills) == len(r.nodes)
    restart_all = next(e for e in nem if e["f"] == "daemon-restart-all")
    assert all(k["time"] <= restart_all["time"] for k in kills)
    limit = next(e for e in nem if e["f"] == "ec2-fault" and e["type"] == "start")
    assert limit["value"]["scope"] == "account"
    refused = [a for a in r.audit if a["outcome"] == "RequestLimitExceeded"]
    reached = [f for f in r.exposure["faults"] if f["op"] == "ec2-fault"]
    assert reached and reached[0]["reached"] > 0, (refused, reached)


# -- other-actor-sweeps-eni (upstream 1099, 377/391) ----------------------------------------------

@check("other-actor-sweeps-eni")
def another_principal_unassigned_and_swept(r, seen) -> None:
    """Another principal (its own access key in the audit) unassigned the node's free
    addresses and swept an ENI the node had created and not yet attached, whose attach
    then answered NotFound."""
    other = [a for a in r.audit if a["principal"] == OTHER_PRINCIPAL_KEY]
    assert any(a["action"] == "UnassignPrivateIpAddresses" for a in other), other
    swept = {a["eni_id"] for a in other if a["action"] == "DeleteNetworkInterface"
             and a["outcome"] == "ok"}
    assert swept, other
    created = {a["eni_id"] for a in r.audit if a["action"] == "CreateNetworkInterface"
               and a["principal"] != OTHER_PRINCIPAL_KEY}
    assert swept <= created
    assert any(a["action"] == "AttachNetworkInterface" and a["eni_id"] in swept
               and a["outcome"] == "InvalidNetworkInterfaceID.NotFound" for a in r.audit)


# -- imds-lists-deleted-eni: the deleted ENI was listed at the restart, the end is recorded ------

@check("imds-lists-deleted-eni")
def the_restart_met_a_listed_deleted_eni_and_the_fault_end_is_recorded(r, seen) -> None:
    """The ENI the nemesis deleted was in IMDS when the daemon restarted (the run exercised
    #1008, not a restart alone), and the fault's end is one nemesis end entry."""
    nemesis = [e for e in r.history if e["process"] == "nemesis"]
    deleted = [e for e in nemesis if e["f"] == "ec2-delete-eni"]
    assert len(deleted) == 1, deleted
    faults = [e for e in nemesis if e["f"] == "imds-fault"]
    assert [e["type"] for e in faults] == ["start", "end"], faults
    assert faults[1]["value"]["by"] in ("ended", "removed")
    if faults[1]["value"]["by"] == "ended":
        assert "change 2" in faults[1]["value"]["why"]
    # A request of the node's daemon answered while the fault was active.
    fid = faults[0]["value"]["id"]
    assert any(fid in (q.get("faults") or ()) for q in r.imds_requests if not q.get("observer"))


# -- crash-after-attach, crash-after-assign (upstream #66/#74, #401): crash points -------------

def _crash_kills(r) -> list[dict]:
    return [e["value"] for e in r.history if e["process"] == "nemesis"
            and e["f"] == "daemon-kill" and e["type"] == "start"]


@check("crash-after-attach")
def the_daemon_died_after_the_attach_and_the_eni_was_used(r, seen) -> None:
    """The crash point fired once, on node 0's own attach (the gate told the caller by its
    source address), and the ENI it attached was then used by a pod, not leaked."""
    [kill] = _crash_kills(r)
    assert kill["after_call"] == "AttachNetworkInterface" and kill["target"]["node"] == 0
    titles = [s["title"] for s in r.steps]
    assert "after the restart the ENI was used" in titles, titles


@check("crash-after-assign")
def the_daemon_died_after_the_assign_and_the_addresses_were_adopted(r, seen) -> None:
    [kill] = _crash_kills(r)
    assert kill["after_call"] == "AssignPrivateIpAddresses" and kill["target"]["node"] == 0
    assert any(s["title"].startswith("after the restart the assigned addresses were")
               for s in r.steps)


# -- attach-misleading-error (issue 30 row H): the outage reached the build, which recovered ---

@check("attach-misleading-error", profiles=("hardened",))
def attach_refused_then_attached(r, seen) -> None:
    """The outage's misleading error answered the build's Attach calls, and an Attach
    succeeded once it was over (the liveness the scenario asserts had an ENI behind it)."""
    import json

    with open(r.report["json"]) as f:
        audit = json.load(f)["audit"]
    attaches = [a for a in audit if a["action"] == "AttachNetworkInterface"]
    refused = [a for a in attaches if a["outcome"] == "IncorrectInstanceState"]
    assert refused and attaches[-1]["outcome"] == "ok", attaches[-3:]
    assert max(a["time"] for a in refused) < attaches[-1]["time"]


# -- restart-while-detaching: the restart fell inside the detach, and no ENI was left ----------

@check("restart-while-detaching")
def the_restart_fell_inside_the_detach_and_every_freed_eni_went(r, seen) -> None:
    """The run exercised the window of upstream #732 (the daemon was ready again while EC2
    still showed the ENI detaching), and the monitor saw every ENI it freed leave again."""
    titles = [s["title"] for s in r.steps]
    assert any("daemon ready again" in t and "still detaching" in t for t in titles), titles
    loose = [e["value"]["enis"] for e in r.history if e["f"] == "loose-enis"]
    assert loose and loose[-1] == {}, loose[-1:]


# -- runtime-retries: every retry of the runtime ran and was answered as the spec wants --------

@check("runtime-retries")
def every_retry_of_the_runtime_was_made(r, seen) -> None:
    """Each kind of retry is in the history, the ones the spec judges answered success (or,
    for a repeated ADD, the same address), and the replayed DEL came after its address went
    to a new pod, which kept it."""
    ops = [e for e in r.history if e["process"] == "client" and e["f"] == "cni-retry"]
    kinds = {e["value"]["op"] for e in ops}
    assert kinds >= {"add-repeat", "check-after-repeat", "del-empty-netns", "del-replayed",
                     "del-daemon-down", "del-given-up"}, kinds
    for e in ops:
        v = e["value"]
        if v["op"] == "add-repeat":
            assert e["type"] == "ok" and v["answer"] == v["ip"], e
        elif v["op"] in ("check-after-repeat", "del-empty-netns", "del-replayed",
                         "del-after-restart"):
            assert e["type"] == "ok", e
    assert any(e["value"]["op"] == "del-replayed" and e["value"]["held_by"] for e in ops), ops
    # The retries reached pods that lived through the daemon's restart.
    back = [e["index"] for e in r.history if e["process"] == "nemesis"
            and e["f"] == "daemon-kill" and e["type"] == "end"]
    assert back, "the daemon was never restarted"
    after = {e["value"]["op"] for e in ops if e["index"] > back[-1]}
    assert after >= {"add-repeat", "del-replayed"}, after


# -- torn-checkpoint: each node's state file was torn, and the reference daemon refused it ----

@check("torn-checkpoint")
def each_state_file_was_torn_and_the_daemon_refused_to_start_on_it(r, seen) -> None:
    """Both nodes' daemons died in a write of their state, their ipam.json was cut short on
    one and emptied on the other, and each daemon, started twice, refused it (upstream's
    ReadBackingStore error): the run judged a refusal, not a restart on intact state."""
    titles = [s["title"] for s in r.steps]
    torn = [t for t in titles if "ipam.json torn:" in t]
    assert len(torn) == 2 and torn[1].endswith("-> 0 bytes"), titles
    assert sum("refuses to start" in t and "cannot recover" in t for t in titles) == 2, titles


# -- the IPv6 twins (issue 40): what each run went through -------------------------------------

@check("ipv6-ip-reuse-cooldown")
def the_ipv6_cooldown_check_was_armed_and_a_replayed_del_met_a_reused_address(r, seen) -> None:
    """The deleted pods' peers kept their flows to the old IPv6 addresses (the check was
    armed) and none was answered; after the cooldowns a new pod got a deleted pod's
    address, and that old pod's DEL replayed then succeeded."""
    ghosts = sum((e["value"] or {}).get("ghost_sent", 0) for e in r.history
                 if e["f"] == "stats")
    assert ghosts > 0
    assert not [e for e in r.history if e["f"] == "stale"]
    replays = [e for e in r.history if e["process"] == "client" and e["f"] == "cni-retry"
               and e["value"]["op"] == "del-replayed"]
    assert all(":" in e["value"]["ip"] for e in replays), replays
    assert any(e["value"]["held_by"] and e["type"] == "ok" for e in replays), replays


@check("ipv6-restart-keeps-pods")
def the_daemon_died_mid_add_and_inside_checkpoint_writes(r, seen) -> None:
    """Node 0's daemon was SIGKILLed four times: twice with an ADD in flight, twice by the
    write trap as it opened a file of its state for writing; each time it came back."""
    kills = [e["value"] for e in r.history if e["process"] == "nemesis"
             and e["f"] == "daemon-kill" and e["type"] == "start"]
    assert len(kills) == 4 and {k["target"]["node"] for k in kills} == {0}, kills
    titles = [s["title"] for s in r.steps]
    assert sum("killed opening" in t for t in titles) == 2, titles
    assert sum("restarted, the ADD retried" in t for t in titles) == 2, titles


@check("ipv6-prefix-missing-from-imds")
def the_restarted_daemon_read_ipv6_prefix_without_its_80(r, seen) -> None:
    """The restarted daemon asked IMDS for its primary ENI's ipv6-prefix while the fault
    left its /80 out (answered 404), and new pods came on the node after."""
    [fault] = [f for f in r.exposure["faults"] if f["op"] == "imds-fault"]
    assert fault["reached"] >= 1, r.exposure
    asked = [q for q in r.imds_requests if fault["id"] in (q.get("faults") or ())]
    assert asked and all(q["path"].endswith("/ipv6-prefix") and q["status"] == 404
                         for q in asked), asked
    titles = [s["title"] for s in r.steps]
    assert any(t.startswith("daemon restarted") for t in titles), titles
    assert any(t.startswith("IMDS complete again") for t in titles), titles
