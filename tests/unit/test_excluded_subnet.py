"""The excluded-subnet checker: a new ENI in a subnet taken out of discovery, after it was."""

from __future__ import annotations

from cnikit.check.checkers.excluded_subnet import EXCLUDED, ExcludedSubnet


def fold(*entries) -> ExcludedSubnet:
    c = ExcludedSubnet()
    for at, (process, f, value) in enumerate(entries):
        c.step({"process": process, "f": f, "value": value, "time": float(at)}, None)
    return c


def owned(*ips_enis) -> tuple:
    return ("monitor", "ownership", {"set": {ip: ["i-1", eni, False] for ip, eni in ips_enis}})


MARK = ("scenario", EXCLUDED, {"subnet": "subnet-x", "cidr": "10.0.64.0/20"})


def test_a_new_eni_in_the_excluded_subnet_after_the_mark_is_a_violation():
    c = fold(owned(("10.0.1.10", "eni-a")), MARK, owned(("10.0.64.9", "eni-b")))
    assert list(c.open) == ["eni-b"] and c.open["eni-b"].detail["subnet"] == "subnet-x"


def test_an_eni_made_there_before_the_mark_may_keep_serving():
    c = fold(owned(("10.0.64.5", "eni-a")), MARK, owned(("10.0.64.6", "eni-a")),
             owned(("10.0.1.11", "eni-c")))
    assert not c.open
