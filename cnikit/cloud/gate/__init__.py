"""The EC2 gate: an HTTP front speaking the EC2 Query protocol in front of moto/LocalStack
(server.py says how it works)."""

from cnikit.cloud.gate.server import CONTROL, Gate, check_region

__all__ = ["CONTROL", "Gate", "check_region"]
