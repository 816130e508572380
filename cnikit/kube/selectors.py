"""Label and field selectors as list and watch take them (`labelSelector=app=web,tier!=db`,
`fieldSelector=spec.nodeName=node-1`). Any field path is accepted, where an API server
allows a few per kind: a client that asks for one gets what it asked for. A selector that
does not parse raises SelectorError, one line."""

from __future__ import annotations

import re

_SET = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


class SelectorError(ValueError):
    pass


def _split(text: str) -> list[str]:
    """Terms split on the commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms if t.strip()]


def _term(term: str):
    """One term as a test on the value found (None: no such key)."""
    if m := _SET.match(term):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return key, lambda v: v is not None and v in values
        return key, lambda v: v is None or v not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (s.strip() for s in term.split(op, 1))
            if not key:
                break
            if op == "!=":
                return key, lambda v, want=value: v != want
            return key, lambda v, want=value: v == want
    if term.startswith("!") and term[1:].strip():
        return term[1:].strip(), lambda v: v is None
    if re.fullmatch(r"[\w./-]+", term):
        return term, lambda v: v is not None
    raise SelectorError(f"selector term {term!r} does not parse")


def parse(text: str | None) -> list:
    return [_term(t) for t in _split(text or "")]


def _field(obj: dict, path: str) -> str:
    """A field's value as a field selector compares it: a missing field is "" (as an API
    server's `spec.nodeName=` finds the pods not scheduled yet)."""
    node = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


class Selector:
    """Both selectors of one request, matched against an object."""

    def __init__(self, labels: str | None = None, fields: str | None = None):
        self.labels = parse(labels)
        self.fields = parse(fields)

    def matches(self, obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return (all(test(labels.get(key)) for key, test in self.labels)
                and all(test(_field(obj, key)) for key, test in self.fields))
