"""fault_imds's pure parts: Describe output -> tree, and the engine's composition of faults,
on hand-built EC2 observations with a controlled clock (the live tests cover the wiring)."""

from __future__ import annotations

import bisect

from fault_imds.engine import Engine
from fault_imds.tree import MACS, Ec2State, build_models, render, serve_map

MAC0, MAC1 = "02:00:00:00:00:01", "02:00:00:00:00:02"


def eni(eni_id, mac, iid, device, ips, prefixes=(), primary=None, status="attached"):
    primary = primary or ips[0]
    return {
        "NetworkInterfaceId": eni_id,
        "MacAddress": mac,
        "Attachment": {"InstanceId": iid, "DeviceIndex": device, "Status": status}
        if iid else {},
        # Describe does not promise the primary comes first.
        "PrivateIpAddresses": [{"PrivateIpAddress": ip, "Primary": ip == primary}
                               for ip in reversed(ips)],
        "PrivateIpAddress": primary,
        "Ipv4Prefixes": [{"Ipv4Prefix": p} for p in prefixes],
        "SubnetId": "subnet-1",
        "VpcId": "vpc-1",
        "OwnerId": "123456789012",
        "Groups": [{"GroupId": "sg-1", "GroupName": "default"}],
    }


def state(t, enis, instances=("i-1",), terminated=()):
    insts = {
        iid: {"InstanceId": iid, "InstanceType": "m5.large", "ImageId": "ami-1",
              "State": {"Name": "terminated" if iid in terminated else "running"},
              "Placement": {"AvailabilityZone": "us-east-1a"}, "PrivateIpAddress": "10.0.1.4"}
        for iid in instances
    }
    return Ec2State(
        t=t, wall=1e9 + t, instances=insts, enis=tuple(enis),
        subnets={"subnet-1": {"SubnetId": "subnet-1", "CidrBlock": "10.0.1.0/24", "VpcId": "vpc-1"}},
        vpcs={"vpc-1": {"VpcId": "vpc-1", "CidrBlock": "10.0.0.0/16", "CidrBlockAssociationSet": [
            {"CidrBlock": "10.0.0.0/16", "CidrBlockState": {"State": "associated"}},
            {"CidrBlock": "10.1.0.0/16", "CidrBlockState": {"State": "associated"}}]}},
    )


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class History:
    """The snapshots an Ec2View would keep (only the at() the engine uses)."""

    def __init__(self):
        self.states: list[Ec2State] = []

    def add(self, s: Ec2State) -> Ec2State:
        self.states.append(s)
        return s

    def at(self, t):
        i = bisect.bisect_right([s.t for s in self.states], t) - 1
        return self.states[max(i, 0)] if self.states else None


def served_ips(engine, iid="i-1", mac=MAC0):
    body = engine.served[iid].get(f"{MACS}{mac}/local-ipv4s".lstrip("/"))
    return body.decode().split("\n") if body is not None else None


def test_build_models_primary_first_prefixes_and_attachment_rules():
    s = state(0, [
        eni("eni-1", MAC1, "i-1", 1, ["10.0.1.9", "10.0.1.10"], prefixes=["10.0.1.16/28"]),
        eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5", "10.0.1.6"]),
        eni("eni-2", "02:00:00:00:00:03", None, 0, ["10.0.1.20"]),          # not attached
        eni("eni-3", "02:00:00:00:00:04", "i-1", 2, ["10.0.1.30"], status="detached"),
        eni("eni-4", "02:00:00:00:00:05", "i-2", 0, ["10.0.1.40"]),          # terminated
    ], instances=("i-1", "i-2"), terminated=("i-2",))
    models = build_models(s)
    assert list(models) == ["i-1"]
    m = models["i-1"]
    assert [e.mac for e in m.enis] == [MAC0, MAC1]  # device order
    assert m.mac == MAC0
    # Primary first, then secondaries in Describe's order.
    assert m.enis[0].local_ipv4s == ("10.0.1.4", "10.0.1.6", "10.0.1.5")
    assert m.enis[1].ipv4_prefixes == ("10.0.1.16/28",)
    leaves = render(m)
    assert leaves[f"{MACS}{MAC1}/ipv4-prefix"] == "10.0.1.16/28"
    assert f"{MACS}{MAC0}/ipv4-prefix" not in leaves  # 404 when none, as AWS
    assert leaves[f"{MACS}{MAC0}/vpc-ipv4-cidr-blocks"] == "10.0.0.0/16\n10.1.0.0/16"
    assert leaves[f"{MACS}{MAC0}/vpc-ipv4-cidr-block"] == "10.0.0.0/16"


def test_serve_map_listings():
    m = build_models(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"])]))["i-1"]
    served = serve_map(render(m))
    assert served[""].split(b"\n")[0] == b"1.0" and served[""].endswith(b"\n2021-03-23\nlatest")
    assert served["latest/"] == b"dynamic\nmeta-data"
    assert served["latest/dynamic/"] == b"instance-identity/"
    assert served[MACS] == f"{MAC0}/".encode()
    assert served[MACS.rstrip("/")] == served[MACS]
    assert b"network/" in served["latest/meta-data/"].split(b"\n")
    assert served["latest/meta-data/placement/region/"] == b"us-east-1"
    # No ENI at all: the macs directory is still there, empty.
    bare = serve_map(render(build_models(state(0, []))["i-1"]))
    assert bare[MACS] == b""


def test_engine_events_and_stale_then_missing_composition():
    clock = Clock()
    e = Engine(clock=clock)
    e.set_state(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5"])]))
    assert served_ips(e) == ["10.0.1.4", "10.0.1.5"]
    e.add({"kind": "stale", "target": {"mac": MAC0}})
    e.add({"kind": "missing", "target": {"ips": ["10.0.1.5"]}})
    e.set_state(state(1, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.7"])]))
    # stale holds [.4, .5]; missing (applied after stale) removes .5
    assert served_ips(e) == ["10.0.1.4"]
    e.clear()
    assert served_ips(e) == ["10.0.1.4", "10.0.1.7"]
    served = [(ev["type"], ev.get("values")) for ev in e.events.since(0)]
    assert served[0] == ("served", ["10.0.1.4", "10.0.1.5"])
    assert ("served", ["10.0.1.4"]) in served
    first_removal = served.index(("fault_removed", None))
    assert ("served", ["10.0.1.4", "10.0.1.7"]) in served[first_removal:]
    assert [t for t, _ in served].count("fault_removed") == 2


def test_engine_expiry_on_tick():
    clock = Clock()
    e = Engine(clock=clock)
    e.set_state(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"])]))
    f = e.add({"kind": "missing", "target": {"mac": MAC0}, "duration": 2})
    assert served_ips(e) is None
    clock.t += 1.9
    e.tick()
    assert served_ips(e) is None
    clock.t += 0.2
    e.tick()
    assert served_ips(e) == ["10.0.1.4"]
    assert e.events.since(0)[-2]["type"] == "fault_expired"
    assert e.events.since(0)[-2]["fault"]["id"] == f.id


def test_engine_lag_follows_history_late():
    clock = Clock()
    hist = History()
    e = Engine(history=hist, clock=clock)
    e.set_state(hist.add(state(90, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"])])))
    e.add({"kind": "lag", "seconds": 5, "target": {"instance_id": "i-1"}})
    e.set_state(hist.add(state(100, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.8"])])))
    assert served_ips(e) == ["10.0.1.4"]
    clock.t = 104.9
    e.tick()
    assert served_ips(e) == ["10.0.1.4"]
    clock.t = 105.0
    e.tick()
    assert served_ips(e) == ["10.0.1.4", "10.0.1.8"]


def test_engine_missing_prefix_and_stale_path():
    e = Engine(clock=Clock())
    e.set_state(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"],
                              prefixes=["10.0.1.16/28", "10.0.1.32/28"])]))
    e.add({"kind": "missing", "target": {"ips": ["10.0.1.16/28"]}})
    assert e.served["i-1"][f"{MACS}{MAC0}/ipv4-prefix"] == b"10.0.1.32/28"
    e.add({"kind": "stale", "target": {"path": "*/instance-type"}})
    s2 = state(1, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"])])
    s2.instances["i-1"]["InstanceType"] = "m5.xlarge"
    e.set_state(s2)
    assert e.served["i-1"]["latest/meta-data/instance-type"] == b"m5.large"
    assert f"{MACS}{MAC0}/ipv4-prefix" not in e.served["i-1"]


def test_caller_identity_by_ip_and_prefix():
    e = Engine(clock=Clock())
    e.set_state(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5"],
                              prefixes=["10.0.1.16/28"])]))
    assert e.owner_of("10.0.1.5") == "i-1"
    assert e.owner_of("10.0.1.20") == "i-1"
    assert e.owner_of("10.0.1.99") is None


def test_a_kinds_declared_order_places_it_in_the_composition():
    """A kind declares its stage and order in its own class; the engine needs nothing else.
    A throwaway content kind adding an address, ordered between `stale` (20) and `missing`
    (30), runs there whatever the creation order."""
    from fault_imds.faults import KINDS, ImdsFault

    class AddOne(ImdsFault):
        kind = "test-add-one"
        stage = "content"
        order = 25

        def apply(self, view):
            from dataclasses import replace

            for iid, m in list(view.models.items()):
                view.models[iid] = m.with_enis(
                    replace(x, local_ipv4s=(*x.local_ipv4s, "10.0.1.99")) for x in m.enis)

    try:
        e = Engine(clock=Clock())
        e.set_state(state(0, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5"])]))
        added = e.add({"kind": "test-add-one"})
        assert served_ips(e) == ["10.0.1.4", "10.0.1.5", "10.0.1.99"]  # it fires
        e.remove(added.id)
        e.add({"kind": "missing", "target": {"ips": ["10.0.1.99"]}})  # created first
        e.add({"kind": "test-add-one"})
        assert served_ips(e) == ["10.0.1.4", "10.0.1.5"]  # missing ran after it
        e.clear()
        for kind, target in (("missing", {"ips": ["10.0.1.99"]}), ("test-add-one", {}),
                             ("stale", {"mac": MAC0})):  # created in reverse order
            e.add({"kind": kind, "target": target})
        assert [f.kind for f in e.content_faults] == ["stale", "test-add-one", "missing"]
    finally:
        KINDS.remove("test-add-one")


def test_stale_until_change_lists_a_departed_eni_until_the_next_change():
    """Upstream #1008/#2497: a detached, deleted ENI stays listed until the instance's
    interfaces change again; missed_changes=1 survives the detach itself."""
    import pytest

    from fault_imds.faults import SpecError

    e0 = eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5"])
    e1 = eni("eni-1", MAC1, "i-1", 1, ["10.0.1.9", "10.0.1.10"])
    e2 = eni("eni-2", "02:00:00:00:00:03", "i-1", 2, ["10.0.1.20"])
    e = Engine(clock=Clock())
    e.set_state(state(0, [e0, e1]))
    with pytest.raises(SpecError, match="instance_id"):
        e.add({"kind": "stale-until-change", "target": {}})
    f = e.add({"kind": "stale-until-change", "target": {"instance_id": "i-1"},
               "missed_changes": 1})
    # eni-1 detached and deleted (change 1, missed): still listed, its addresses as they were.
    e.set_state(state(1, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.6"])]))
    assert f.id in e.faults
    assert served_ips(e, mac=MAC1) == ["10.0.1.9", "10.0.1.10"]
    # An interface still attached follows EC2.
    assert served_ips(e) == ["10.0.1.4", "10.0.1.6"]
    # The next attach (change 2) ends it: the list is EC2's again, with why.
    e.set_state(state(2, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.6"]), e2]))
    assert f.id not in e.faults
    assert served_ips(e, mac=MAC1) is None
    assert served_ips(e, mac="02:00:00:00:00:03") == ["10.0.1.20"]
    ended = [ev for ev in e.events.since(0) if ev["type"] == "fault_ended"]
    assert len(ended) == 1 and ended[0]["fault"]["id"] == f.id
    assert "change 2 of i-1" in ended[0]["why"] and "+02:00:00:00:00:03" in ended[0]["why"]


def test_stale_until_change_default_ends_at_the_first_change_and_hides_new_enis():
    e0 = eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"])
    e = Engine(clock=Clock())
    e.set_state(state(0, [e0]))
    f = e.add({"kind": "stale-until-change", "target": {"instance_id": "i-1"}})
    # An address change is no interface change: the fault stays, the entry follows EC2.
    e.set_state(state(1, [eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4", "10.0.1.5"])]))
    assert f.id in e.faults and served_ips(e) == ["10.0.1.4", "10.0.1.5"]
    e.set_state(state(2, [e0, eni("eni-1", MAC1, "i-1", 1, ["10.0.1.9"])]))
    assert f.id not in e.faults and served_ips(e, mac=MAC1) == ["10.0.1.9"]
    f2 = e.add({"kind": "stale-until-change", "target": {"instance_id": "i-1"},
                "missed_changes": 5})
    e.set_state(state(3, [e0, eni("eni-1", MAC1, "i-1", 1, ["10.0.1.9"]),
                          eni("eni-2", "02:00:00:00:00:03", "i-1", 2, ["10.0.1.20"])]))
    assert f2.id in e.faults and served_ips(e, mac="02:00:00:00:00:03") is None


def test_a_detaching_eni_is_listed_and_an_attaching_one_is_not():
    """The gate's slow-attachment (upstream #732): real IMDS lists an ENI until its detach
    completes, and not before its attach has."""
    m = build_models(state(0, [
        eni("eni-0", MAC0, "i-1", 0, ["10.0.1.4"]),
        eni("eni-1", MAC1, "i-1", 1, ["10.0.1.9"], status="detaching"),
        eni("eni-2", "02:00:00:00:00:03", "i-1", 2, ["10.0.1.20"], status="attaching"),
    ]))["i-1"]
    assert [e.mac for e in m.enis] == [MAC0, MAC1]
