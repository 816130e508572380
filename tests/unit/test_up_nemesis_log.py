"""`cnikit up` shows each fault and nemesis action on its terminal as it happens (and logs
it to its NEMESIS file); a fault without a duration says it lasts until removed."""

from __future__ import annotations

import json
import re

from cnikit.check.history import History
from cnikit.cloud.faults import FaultSet
from cnikit.cluster.nemesis import Nemesis
from cnikit.cluster.nemesis_ec2_faults import Ec2Faults
from cnikit.scenarios.cli.up import log_nemesis

CLOCK = r"\d\d:\d\d:\d\d"


def test_faults_show_as_they_are_injected_and_removed(tmp_path):
    history, shown = History(), []
    log = tmp_path / "up" / "nemesis.jsonl"
    log_nemesis(history, log, echo=shown.append)
    nemesis = Nemesis(history)
    faults = Ec2Faults(nemesis, FaultSet(seed=1))

    limit = faults.add("throttle", scope="account", rate=1, burst=3)
    assert re.fullmatch(rf"{CLOCK} ec2-fault {limit} kind=throttle scope=account rate=1 burst=3"
                        r", until removed \(no duration\)", shown[-1]), shown
    brief = faults.add("throttle", target={"action": "AssignPrivateIpAddresses"},
                       probability=0.5, duration=30)
    assert re.fullmatch(rf"{CLOCK} ec2-fault {brief} action=AssignPrivateIpAddresses "
                        r"kind=throttle probability=0.5 for 30s", shown[-1]), shown
    faults.remove(limit)
    assert re.fullmatch(rf"{CLOCK} ec2-fault {limit} ended \(removed\)", shown[-1]), shown
    nemesis.heal()
    assert re.fullmatch(rf"{CLOCK} heal", shown[-1]), shown
    assert len(shown) == 4
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["type"], e["f"]) for e in logged] == [
        ("start", "ec2-fault"), ("start", "ec2-fault"), ("end", "ec2-fault"), ("info", "heal")]


def test_other_processes_are_not_shown(tmp_path):
    history, shown = History(), []
    log_nemesis(history, tmp_path / "nemesis.jsonl", echo=shown.append)
    history.info("monitor", "owners", {"ips": {}})
    assert shown == []
