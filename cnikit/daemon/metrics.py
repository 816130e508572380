"""Prometheus text exposition with upstream's awscni_* names (no client library needed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cnikit.daemon.ipamd import IpamD

HELP = {
    "awscni_assigned_ip_addresses": ("gauge", "The number of IP addresses assigned to pods"),
    "awscni_total_ip_addresses": ("gauge", "The total number of IP addresses"),
    "awscni_total_ipv4_prefixes": ("gauge", "The total number of IPv4 prefixes"),
    "awscni_eni_allocated": ("gauge", "The number of ENIs allocated"),
    "awscni_eni_max": ("gauge", "The maximum number of ENIs that can be attached to the instance"),
    "awscni_ip_max": ("gauge", "The maximum number of IP addresses that can be allocated"),
    "awscni_reconcile_count": ("counter", "The number of times ipamd reconciles on ENIs and IPs"),
    "awscni_ipamd_error_count": ("counter", "The number of errors encountered in ipamd"),
    "awscni_aws_api_error_count": ("counter", "The number of times AWS API returns an error"),
    "awscni_aws_api_latency_ms_sum": ("counter", "AWS API call latency in ms, total"),
    "awscni_aws_api_latency_ms_count": ("counter", "AWS API calls"),
    "awscni_add_ip_req_count": ("counter", "The number of add IP address requests"),
    "awscni_del_ip_req_count": ("counter", "The number of delete IP address requests"),
    "awscni_force_removed_ips": ("counter", "The number of IPs force removed while assigned to a pod"),
    "awscni_force_removed_enis": ("counter", "The number of ENIs force removed while assigned to pods"),
    "cnikit_pool_within_targets": ("gauge", "1 when the warm pool is at its targets"),
}


def _labels(labels: tuple) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{str(v).replace(chr(34), "")}"' for k, v in labels)
    return "{" + inner + "}"


def render(d: IpamD) -> str:
    s = d.ds.stats()
    cap = d.capacity
    gauges = {
        "awscni_assigned_ip_addresses": s.assigned,
        "awscni_total_ip_addresses": s.total,
        "awscni_total_ipv4_prefixes": s.prefixes,
        "awscni_eni_allocated": s.enis,
        "awscni_eni_max": cap.max_enis if cap else 0,
        "awscni_ip_max": cap.max_enis * cap.slots_per_eni * (16 if d.cfg.prefix_delegation else 1)
        if cap else 0,
        "cnikit_pool_within_targets": int(d.within_targets()) if cap else 0,
    }
    series: dict[str, list[str]] = {}
    for name, value in gauges.items():
        series.setdefault(name, []).append(f"{name} {value}")
    for (name, labels), value in sorted(d.metrics.counters.items()):
        series.setdefault(name, []).append(f"{name}{_labels(labels)} {value:g}")
    # Counters that never fired still exist at zero, as client_golang would show them.
    for name in ("awscni_add_ip_req_count", "awscni_force_removed_ips", "awscni_force_removed_enis"):
        series.setdefault(name, [f"{name} 0"])
    out = []
    for name, lines in series.items():
        kind, text = HELP.get(name, ("untyped", name))
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"
