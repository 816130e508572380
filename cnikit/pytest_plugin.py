"""pytest plugin for cnikit (entry point `pytest11`).

Options select the profile, the EC2 upstream and where reports go. The fixtures
(`cloud`, `imds`, `cluster`, `invariants`) come with the scenarios issue; until then
the options are registered so every cnikit test run accepts them.
"""

from __future__ import annotations


def pytest_addoption(parser) -> None:
    group = parser.getgroup("cnikit")
    group.addoption(
        "--cnikit-profile",
        default="hardened",
        help="daemon profile: vpc-cni-1.18.3, vpc-cni-1.18.4 or hardened (default)",
    )
    group.addoption(
        "--cnikit-ec2",
        default="moto",
        choices=("moto", "localstack"),
        help="EC2 upstream behind the gate (default: embedded moto)",
    )
    group.addoption("--cnikit-report", default=None, help="directory for run reports")
