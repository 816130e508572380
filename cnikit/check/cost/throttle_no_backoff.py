from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from cnikit.check.cost.base import Calls, Finding, Rule

# A call within this long of the same caller's throttled one did not back off: the answer
# came back in a millisecond or two and the caller asked again at once. A client that
# waits a random share of a second, as botocore's standard retry mode does, lands this
# close only now and then (5% of its retries at 50 ms).
AT_ONCE_S = 0.05
# Retries at once by one node that make a finding, in number and as a share of its throttled
# calls: a few are a random back-off's luck or two threads of one daemon throttled together,
# a stream is a loop without back-off. Measured under the account's bucket of
# restart-storm-throttled: the reference daemon 1-5 of 13-25 per node (6-23%), the same
# daemon retrying its start-up at once (bench/mutants.py, no-backoff-on-throttle) 75-95 of
# 168-202 (45-47%).
AT_LEAST = 10
SHARE = 1 / 3


class ThrottleNoBackoff(Rule):
    """The build answered EC2's throttling by calling again at once, again and again:
    under the account's rate limit it keeps the shared bucket empty for every node and every
    other caller of the account (upstream #873, #617: every node restarted together; fixed
    by spreading and backing off the calls, #808, #809, #909)."""

    kind = "throttle-no-backoff"
    why = "aws/amazon-vpc-cni-k8s#873, #617"

    def judge(self, calls: Calls) -> list[Finding]:
        by_node: dict[str, list[float]] = defaultdict(list)
        for r in calls.throttled:
            if r.get("instance_id"):
                by_node[r["instance_id"]].append(r["time"])
        out = []
        for instance, times in by_node.items():
            at_once = [b for a, b in pairwise(times) if b - a < AT_ONCE_S]
            if len(at_once) < max(AT_LEAST, SHARE * len(times)):
                continue
            node = calls.nodes.get(instance, instance)
            out.append(Finding(self.kind, node, len(at_once), at_once[0],
                               f"{node} called EC2 again within {AT_ONCE_S * 1000:.0f} ms of "
                               f"a throttled call {len(at_once)} times (of {len(times)} "
                               f"calls throttled)"))
        return out
