"""Which EC2 calls the EC2 API's faults spare.

The fault IMDS marks every EC2 call it makes with CALLER_HEADER: it plays the hypervisor,
whose view of an instance does not go through the EC2 API, so the gate never throttles,
fails, delays or Describe-lags it. IMDS staleness is the IMDS's own fault kinds. The header
lives here, below both, so neither the gate nor the IMDS imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping

CALLER_HEADER = ("X-Cnikit-Caller", "imds")


def spared(headers: Mapping[str, str] | None) -> bool:
    """Whether a call carries the fault IMDS's mark (pass case-insensitive headers)."""
    return headers is not None and headers.get(CALLER_HEADER[0]) == CALLER_HEADER[1]
