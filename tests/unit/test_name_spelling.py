"""Names users type and read are spelled with hyphens (`describe-lag`, `restart-all`). The
fault kinds once spelled with underscores are still taken in that spelling wherever a user
may send it (a control API, the `fault-imds` command line, a fixture's argument, a history
an older version recorded), mapped to the name in one place (faultcore.registry) and
answered with a one-line deprecation note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cnikit.check.history import History
from cnikit.cloud.faults import KINDS as EC2_KINDS
from cnikit.cluster.nemesis_ec2_faults import Ec2Faults
from cnikit.cluster.nemesis_imds import NemesisFaultClient
from cnikit.cluster.nemesis_log import NemesisLog
from cnikit.report.coverage import fault_class
from cnikit.report.timeline import _fault_label
from fault_imds.client import FaultClient
from fault_imds.faults import KINDS as IMDS_KINDS
from fault_imds.server import ImdsServer
from faultcore.errors import SpecError
from faultcore.registry import BadSpelling, Registry
from tests.unit.imds_support import Imds
from tests.waiting import wait_for

FAULT_IMDS = str(Path(sys.executable).parent / "fault-imds")
# Every old spelling a user may still send, and the name it means.
RENAMED = {"imds": {"stale_until_change": "stale-until-change"},
           "ec2": {"describe_lag": "describe-lag", "addresses_lag": "addresses-lag",
                   "lost_response": "lost-response", "slow_attachment": "slow-attachment"}}


def note(noun: str, old: str) -> str:
    return (f"{noun} {old!r} is spelled {old.replace('_', '-')!r} now; "
            f"the old spelling is deprecated")


def test_a_name_with_an_underscore_is_refused_naming_its_file():
    reg: Registry[int] = Registry("checker")
    with pytest.raises(BadSpelling) as e:
        reg.add("odd_octet", 1, test_a_name_with_an_underscore_is_refused_naming_its_file)
    assert str(e.value) == ("checker 'odd_octet' in tests/unit/test_name_spelling.py: names "
                            "are spelled with hyphens, 'odd-octet'")
    assert "odd_octet" not in reg and "odd-octet" not in reg


def test_an_old_spelling_means_the_name_and_says_so():
    reg: Registry[int] = Registry("EC2 fault kind")
    reg.add("slow-thing", 1, "a.module")
    assert reg.canonical("slow_thing") == "slow-thing" and reg.lookup("slow_thing") == 1
    assert reg.renamed("slow_thing") == note("EC2 fault kind", "slow_thing")
    assert reg.renamed("slow-thing") is None and reg.canonical("fast_thing") == "fast_thing"
    with pytest.raises(SpecError, match="unknown EC2 fault kind 'fast_thing'"):
        reg.lookup("fast_thing")
    with pytest.warns(DeprecationWarning, match="is spelled 'slow-thing' now"):
        assert reg.respelled("slow_thing") == "slow-thing"


@pytest.mark.parametrize("family, old, new", [
    (family, old, new) for family, names in RENAMED.items() for old, new in names.items()])
def test_the_kits_renamed_kinds_are_found_by_their_old_spelling(family, old, new):
    kinds = IMDS_KINDS if family == "imds" else EC2_KINDS
    assert new in kinds and old not in kinds
    assert kinds.get(old) is kinds.get(new)
    spec = {"kind": old}
    assert kinds.respell(spec) == note(kinds.noun, old) and spec == {"kind": new}


@pytest.fixture(scope="module")
def parts(gate_cloud):
    imds = ImdsServer(ec2_endpoint=gate_cloud.endpoint).start()
    yield gate_cloud, imds
    imds.stop()


@pytest.fixture
def instance(parts, gate_new_vpc):
    """A node the fault IMDS serves already; the gate's faults cleared after the test."""
    cloud, imds = parts
    inst = gate_new_vpc(cloud, nodes=1).instances[0]
    wait_for(lambda: inst.mac in (Imds(imds.url, inst.instance_id).text(
        "/latest/meta-data/network/interfaces/macs/") or ""), 10, "the IMDS to serve the node")
    yield inst
    cloud.gate.faults.clear()
    FaultClient(imds.control_url).clear()


def test_both_control_apis_take_an_old_spelling_and_answer_with_a_note(parts, instance):
    cloud, imds = parts
    gate = FaultClient(cloud.endpoint + "/_cnikit")
    with pytest.warns(DeprecationWarning, match="'describe_lag' is spelled 'describe-lag'"):
        h = gate.add("describe_lag", seconds=1.0, duration=30)
    assert h.fault["kind"] == "describe-lag"
    assert h.deprecated == note("EC2 fault kind", "describe_lag")
    assert [f["kind"] for f in gate.list()] == ["describe-lag"]
    with pytest.warns(DeprecationWarning, match="'stale_until_change' is spelled"):
        h = FaultClient(imds.control_url).add("stale_until_change",
                                              target={"instance_id": instance.instance_id})
    assert h.fault["kind"] == "stale-until-change"
    assert h.deprecated == note("fault kind", "stale_until_change")


def test_the_new_spelling_has_no_note(parts, instance):
    cloud, _ = parts
    h = FaultClient(cloud.endpoint + "/_cnikit").add("describe-lag", seconds=1.0, duration=30)
    assert h.fault["kind"] == "describe-lag" and h.deprecated is None


def test_the_command_line_takes_an_old_spelling_with_a_note_on_stderr(parts, instance):
    _, imds = parts
    p = subprocess.run([FAULT_IMDS, "add", "stale_until_change", "--instance-id",
                        instance.instance_id, "--control-url", imds.control_url],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() in {f["id"] for f in FaultClient(imds.control_url).list()}
    assert p.stderr.splitlines() == [f"fault-imds: {note('fault kind', 'stale_until_change')}"]


def test_the_nemesis_records_a_kind_by_its_name_whatever_its_spelling(parts, instance):
    """What the fixtures and scenarios add through: the history and the report read the name."""
    cloud, imds = parts
    h = History()
    log = NemesisLog(h)
    with pytest.warns(DeprecationWarning, match="'lost_response' is spelled"):
        Ec2Faults(log, cloud.gate.faults).add("lost_response", duration=30)
    with pytest.warns(DeprecationWarning, match="'stale_until_change' is spelled"):
        NemesisFaultClient(log, imds.control_url).add(
            "stale_until_change", target={"instance_id": instance.instance_id})
    started = [e["value"]["kind"] for e in h.entries() if e["type"] == "start"]
    assert started == ["lost-response", "stale-until-change"]


def test_a_history_an_older_version_recorded_reads_by_the_names():
    assert fault_class("ec2-fault", {"kind": "describe_lag"}) == "ec2 describe-lag"
    assert fault_class("imds-fault", {"kind": "stale_until_change"}) == "imds stale-until-change"
    old = {"id": "f1", "kind": "stale_until_change", "target": {"instance_id": "i-1"},
           "missed_changes": 1}
    assert _fault_label(old) == "IMDS stale-until-change missed_changes=1 (instance_id=i-1)"
