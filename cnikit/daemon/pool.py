"""Warm-pool arithmetic: how many IPs, prefixes or ENIs the node is short of, or over.

Pure functions of the datastore's numbers and the configuration, after upstream's
datastoreTargetState / isDatastorePoolTooLow / shouldRemoveExtraENIs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cnikit.daemon.config import Config
from cnikit.daemon.datastore import Stats

PREFIX_SIZE = 16  # a /28


@dataclass(frozen=True)
class Capacity:
    max_enis: int
    slots_per_eni: int  # secondary IPs (or /28 prefixes with prefix delegation) per ENI


@dataclass(frozen=True)
class Decision:
    short: int = 0  # IPs (or prefixes) to add
    over: int = 0  # IPs (or prefixes) that may be released
    free_enis: bool = False  # WARM_ENI_TARGET mode: an empty ENI may go


def decide(cfg: Config, s: Stats, cap: Capacity, free_prefixes: int = 0) -> Decision:
    if cfg.prefix_delegation:
        return _decide_prefixes(cfg, s, free_prefixes)
    if cfg.warm_target_defined:
        short, over = _ip_targets(cfg, s)
        return Decision(short=short, over=over)
    # WARM_ENI_TARGET: keep that many ENIs' worth of free IPs.
    want = cfg.warm_eni_target * cap.slots_per_eni
    short = max(want - s.available, 0)
    if cfg.warm_eni_target == 0 and s.available == 0:
        short = 1
    too_high = s.available >= (cfg.warm_eni_target + 1) * cap.slots_per_eni
    return Decision(short=short, free_enis=too_high)


def _ip_targets(cfg: Config, s: Stats) -> tuple[int, int]:
    short = max(cfg.warm_ip_target - s.available, 0)
    short = max(short, cfg.minimum_ip_target - s.total)
    over = max(min(s.available - cfg.warm_ip_target, s.total - cfg.minimum_ip_target), 0)
    return max(short, 0), over


def _decide_prefixes(cfg: Config, s: Stats, free_prefixes: int) -> Decision:
    if cfg.warm_target_defined:
        short, over = _ip_targets(cfg, s)
        return Decision(short=-(-short // PREFIX_SIZE), over=min(over // PREFIX_SIZE, free_prefixes))
    short = max(cfg.warm_prefix_target - free_prefixes, 0)
    if s.available == 0 and short == 0:
        short = 1
    return Decision(short=short, over=max(free_prefixes - cfg.warm_prefix_target, 0))


def within_targets(cfg: Config, s: Stats, cap: Capacity, free_prefixes: int = 0) -> bool:
    """True when the pool needs neither more nor fewer addresses (or cannot grow further)."""
    d = decide(cfg, s, cap, free_prefixes)
    at_max = s.enis >= cap.max_enis and s.total >= cap.max_enis * cap.slots_per_eni * (
        PREFIX_SIZE if cfg.prefix_delegation else 1)
    return (d.short == 0 or at_max) and d.over == 0 and not d.free_enis
