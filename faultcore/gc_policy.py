"""The kit's own processes collect cyclic garbage less often than Python's defaults.

A full collection walks every object the collector tracks, and a kit process holds EC2's
service model twice over (botocore's, moto's: hundreds of thousands of parsed dicts and
lists), so each one costs 50-200 ms. With Python's thresholds (700, 10, 10) one is
considered every 70,000 net allocations, and a run allocates and drops a great deal
(every EC2 call is parsed, served and serialized in this process). Measured on 2 cores:
the collector took 15 % of all the CPU of `make test`, a quarter of a `cnikit run`
process's own. With THRESHOLDS a `cnikit run` took 11 % less CPU and six matrix cells in
one process 9.5 % less, for 7 MB more at their peak (2,000 Python objects per MB).

Only for processes the kit starts itself (its command lines, scenario workers, its test
suite): a user's pytest process that loads the plugin keeps its own settings.
"""

from __future__ import annotations

import gc

# Young collections every 50,000 net allocations instead of 700; the oldest generation
# is considered every 20 x 20 of those (and, as always, collected only once it grew by a
# quarter since the last full collection), so garbage in cycles is still freed.
THRESHOLDS = (50_000, 20, 20)


def relax() -> None:
    gc.set_threshold(*THRESHOLDS)
