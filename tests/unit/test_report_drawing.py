"""The chart draws each ENI's views per ENI and per time: a freed pod IP that later becomes
another ENI's primary IP stays in the old ENI's IMDS and daemon rows while they list it, its
IP lane keeps its EC2 holder, and an ENI is drawn only from the moment it exists."""

from __future__ import annotations

from html.parser import HTMLParser

from cnikit.check.history import History
from cnikit.report import build, write_report
from cnikit.report.timeline import value_at

T0 = 1_800_000_000.0
I1 = "i-0node"
OLD, NEW = "eni-0old", "eni-0new"
MAC_OLD, MAC_NEW = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
X = "10.0.1.19"  # p1's IP: freed at t=3, the new ENI's primary IP from t=5
SECONDARY = [f"10.0.1.{n}" for n in range(11, 19)] + [X]  # nine on the old ENI


def _own(t: float, h: History, version: int, full: bool, set_: dict, unset: list) -> None:
    h.append("monitor", "info", "ownership", {"version": version, "full": full, "set": set_,
                                              "unset": unset, "prefixes_set": {},
                                              "prefixes_unset": []}, at=T0 + t, mono=t)


def reuse_story(views_by_eni: bool = True) -> dict:
    h = History()
    own = {ip: [I1, OLD, False] for ip in SECONDARY}
    own["10.0.1.10"] = [I1, OLD, True]
    _own(0, h, 1, True, own, [])
    h.append("client", "ok", "pod-add", {"pod": "p1", "node": 0, "instance_id": I1, "ip": X},
             at=T0 + 0.5, mono=0.5)

    def view(t: float, enis: dict[str, list[str]]) -> None:
        v = {"instance_id": I1, "ips": sorted({ip for ips in enis.values() for ip in ips})}
        if views_by_eni:
            v["enis"] = enis
        h.append("monitor", "info", "daemon-view", v, at=T0 + t, mono=t)

    view(1, {OLD: SECONDARY})
    _own(3, h, 2, False, {}, [X])  # EC2 takes X back; the daemon keeps holding it
    view(3.5, {OLD: SECONDARY})
    _own(5, h, 3, False, {X: [I1, NEW, True]}, [])  # a new ENI whose primary IP is X
    view(6, {OLD: SECONDARY, NEW: []})
    h.append("prober", "info", "stats", {"stale": []}, at=T0 + 8, mono=8)
    served = [
        (0.1, MAC_OLD, OLD, ["10.0.1.10", *SECONDARY]),
        (4, MAC_OLD, OLD, ["10.0.1.10", *SECONDARY[:-1]]),
        (5.5, MAC_NEW, NEW, [X]),
    ]
    imds = [{"seq": n, "time": T0 + t, "type": "served", "instance_id": I1, "mac": mac,
             "eni_id": eni, "entry": "local-ipv4s", "values": vals, "present": True}
            for n, (t, mac, eni, vals) in enumerate(served, 1)]
    nodes = [{"index": 0, "name": "node-a", "instance_id": I1,
              "enis": [{"eni_id": OLD, "mac": MAC_OLD, "device_index": 0,
                        "primary_ip": "10.0.1.10"},
                       {"eni_id": NEW, "mac": MAC_NEW, "device_index": 1, "primary_ip": X}]}]
    return {"scenario": "reuse", "profile": "vpc-cni-1.18.3", "seed": 1, "history": h,
            "imds_events": imds, "audit": [], "nodes": nodes, "violations": [
                {"kind": "ip-not-owned", "subject": "p1", "since": T0 + 3, "until": None,
                 "detail": {"ip": X, "node": I1, "held_by": None}}], "warnings": []}


def _eni(tl, eni_id):
    return next(e for e in tl.enis if e.eni_id == eni_id)


def test_a_freed_ip_that_becomes_a_primary_stays_in_the_old_enis_rows():
    _, tl = build(reuse_story())
    old = _eni(tl, OLD)
    # Before the release: IMDS and the daemon list nine, as EC2 does.
    assert value_at(old.ec2, T0 + 2) == frozenset(SECONDARY)
    assert value_at(old.imds, T0 + 2) == frozenset(SECONDARY)
    assert value_at(old.daemon, T0 + 2) == frozenset(SECONDARY)
    # After X became the new ENI's primary: EC2 has eight on the old ENI, the daemon still
    # nine (a divergence the chart must show).
    assert value_at(old.ec2, T0 + 7) == frozenset(SECONDARY[:-1])
    assert value_at(old.daemon, T0 + 7) == frozenset(SECONDARY)


def test_the_divergence_is_drawn_and_the_ip_lane_keeps_its_ec2_holder(tmp_path):
    paths = write_report(tmp_path, reuse_story())
    text = paths["html"].read_text()
    assert "9 \u2260 EC2: +.19" in text  # the daemon's row on the old ENI, after the reuse
    lane = _ip_lane_titles(text, "EC2 holder")
    assert any(OLD in t for t in lane) and any(NEW in t and "primary" in t for t in lane)


def test_an_eni_is_drawn_only_from_when_it_exists():
    for by_eni in (True, False):
        _, tl = build(reuse_story(views_by_eni=by_eni))
        new = _eni(tl, NEW)
        for view in (new.ec2, new.imds, new.daemon):
            assert view, "the new ENI has rows"
            assert min(s.start for s in view) >= T0 + 5, (by_eni, view)


def test_a_deleted_eni_ends_its_ec2_row():
    r = reuse_story()
    _own(7, r["history"], 4, False, {}, [X])  # the new ENI is deleted
    _, tl = build(r)
    new = _eni(tl, NEW)
    assert max(s.end for s in new.ec2) <= T0 + 7


def _ip_lane_titles(html: str, lane: str) -> list[str]:
    """The hover titles of the bars drawn in the IP lanes named `lane`."""

    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.titles: list[str] = []
            self._in = False

        def handle_starttag(self, tag, attrs):
            self._in = tag == "title"

        def handle_endtag(self, tag):
            self._in = False

        def handle_data(self, data):
            if self._in and data.startswith(lane + ":"):
                self.titles.append(data)

    p = P()
    p.feed(html)
    return p.titles
