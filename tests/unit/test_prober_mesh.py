"""The prober's pairing over a mesh with both families: IPv4 pods probe IPv4 pods and the
IPv4 anchor, IPv6 pods IPv6 ones, every pair of a family is covered, none across families.
Real shards (their epoll and eventfd), driven by next_pair() without sockets."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from cnikit.check.prober_shard import Mesh, Settings, Shard

V4 = {i: f"10.0.1.{i}" for i in range(1, 6)}
V6 = {i: f"2600:1f14:0:1:2::{i:x}" for i in range(6, 10)}
ANCHOR4, ANCHOR6 = 100, 101
IPS = {**V4, **V6, ANCHOR4: "10.0.1.1", ANCHOR6: "fd00:ec2::254"}


def probed(mesh: Mesh, shards: int = 1, rounds: int = 12) -> list[tuple[int, int]]:
    """Every pair the shards would probe over `rounds` rounds at full speed."""
    settings = Settings()
    settings.interval = 0.0  # rounds back to back
    prober = SimpleNamespace(mesh=mesh, last_probed={})
    made = [Shard(prober, settings, i, shards) for i in range(shards)]
    pairs = []
    try:
        for shard in made:
            while shard.round_r < rounds:
                pair = shard.next_pair(0.0)
                if pair is None:
                    break
                pairs.append(pair)
    finally:
        for shard in made:
            shard.ep.close()
            shard.close()
    return pairs


def within(ids) -> set[tuple[int, int]]:
    return {(a, b) for a, b in itertools.permutations(ids, 2)}


@pytest.mark.parametrize("shards", [1, 2])
def test_pods_probe_their_own_family_only_and_all_of_it(shards):
    # Added in a mixed order: the mesh groups each family into a ring of its own.
    order = [1, 6, 2, 7, 3, 8, 4, 9, 5]
    mesh = Mesh(order, [ANCHOR4, ANCHOR6], IPS)
    assert mesh.order == (1, 2, 3, 4, 5, 6, 7, 8, 9) and mesh.split == 5
    pairs = probed(mesh, shards)
    mesh_pairs = {p for p in pairs if p[1] not in (ANCHOR4, ANCHOR6)}
    assert mesh_pairs == within(V4) | within(V6)
    assert {p[0] for p in pairs if p[1] == ANCHOR4} == set(V4)
    assert {p[0] for p in pairs if p[1] == ANCHOR6} == set(V6)


def test_one_family_is_one_ring_as_before():
    mesh = Mesh([9, 7, 8, 6], [ANCHOR4, ANCHOR6], IPS)
    assert mesh.order == (9, 7, 8, 6) and mesh.split == 0
    pairs = probed(mesh)
    assert {p for p in pairs if p[1] not in (ANCHOR4, ANCHOR6)} == within(V6)
    assert {p[1] for p in pairs if p[1] in (ANCHOR4, ANCHOR6)} == {ANCHOR6}
    # An IPv4-only mesh keeps its order and probes the IPv4 anchor.
    mesh = Mesh([3, 1, 2], [ANCHOR4], IPS)
    assert mesh.order == (3, 1, 2)
    assert {p[1] for p in probed(mesh)} == {1, 2, 3, ANCHOR4}


@pytest.mark.parametrize("shards", [1, 2])
def test_a_pod_alone_in_its_family_probes_its_anchor_only(shards):
    mesh = Mesh([1, 2, 3, 6], [ANCHOR4, ANCHOR6], IPS)
    pairs = set(probed(mesh, shards))
    assert pairs == within([1, 2, 3]) | {(p, ANCHOR4) for p in (1, 2, 3)} | {(6, ANCHOR6)}
    assert set(probed(Mesh([1, 2, 6], [], IPS), shards)) == within([1, 2])


def test_a_removed_pods_lingering_flows_come_from_its_own_family():
    mesh = Mesh([1, 6, 2, 7, 8], [], IPS)
    assert mesh.peers_of(6, mesh.order) == (7, 8)
    assert mesh.peers_of(1, mesh.order) == (2,)


@pytest.mark.parametrize("mixed", [False, True])
def test_a_pod_leaving_mid_round_never_pairs_a_pod_with_itself(mixed):
    """A round's offset is drawn for the ring as it was when the round began; a pod gone
    mid-round shrinks the ring, and the offset must not come round to the source itself
    (CI: a certification saw pods 'failing' with themselves, which only ever time out)."""
    ids = [1, 2, 3, 4, 5] + ([6, 7, 8, 9] if mixed else [])
    settings = Settings()
    settings.interval = 0.0
    prober = SimpleNamespace(mesh=Mesh(ids, [ANCHOR4], IPS), last_probed={})
    shard = Shard(prober, settings, 0, 1)
    try:
        for r in range(40):
            shard.next_pair(0.0)  # the round begins with the whole ring
            gone = ids[r % len(ids)]
            prober.mesh = Mesh([p for p in ids if p != gone], [ANCHOR4], IPS)
            for _ in range(30):  # the rest of the round on the smaller ring
                pair = shard.next_pair(0.0)
                if pair is None:
                    break
                assert pair[0] != pair[1], pair
            prober.mesh = Mesh(ids, [ANCHOR4], IPS)
    finally:
        shard.ep.close()
        shard.close()
