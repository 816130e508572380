from __future__ import annotations

from collections import defaultdict

from cnikit.check.cost.base import Calls, Finding, Rule

# EC2's answers to a call that asks for more than the instance or ENI may hold: limits the
# build can know (the instance type's, what Describe or its own create answer shows).
LIMIT_CODES = ("PrivateIpAddressLimitExceeded", "AttachmentLimitExceeded")
# Refusals of one kind on one ENI (or instance) that make a finding: one or two are a race
# any design may lose (an answer in flight), a stream is a loop that does not learn.
AT_LEAST = 5


class RefusedOverLimit(Rule):
    """The build asked EC2, again and again, for more addresses or ENIs than the ENI or
    instance may hold, and EC2 refused each time (upstream #989, #1148: a new ENI entered
    the datastore before Describe showed its addresses, and every pool tick asked for them
    again)."""

    kind = "refused-over-limit"
    why = "aws/amazon-vpc-cni-k8s#989, #1148"

    def judge(self, calls: Calls) -> list[Finding]:
        refused: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for r in calls.records:
            subject = r.get("eni_id") or r.get("instance_id") or "?"
            if r["outcome"] in LIMIT_CODES and subject not in calls.touched:
                refused[(subject, r["action"], r["outcome"])].append(r["time"])
        out = []
        for (subject, action, code), times in refused.items():
            if len(times) < AT_LEAST:
                continue
            span = times[-1] - times[0]
            out.append(Finding(self.kind, subject, len(times), times[0],
                               f"EC2 refused {len(times)} {action} calls on {subject} with "
                               f"{code} in {span:.1f}s"))
        return out
