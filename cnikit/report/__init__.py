"""Run reports: `report.json` (the whole record, machine-readable) and `report.html` (the
same record drawn: per ENI the three views over time, faults, pods, violations).

    paths = write_report(out_dir, result)   # -> {"json": Path, "html": Path}

`result` is a scenario RunResult (any object with the attributes below) or a plain dict:
{"scenario", "profile", "seed", "verdict", "seconds", "violations": [...], "warnings": [...],
 "history": [entries of cnikit.check.history], "imds_events": [fault IMDS GET /events],
 "audit": [gate audit records], "versions": {...}}, optionally "imds_requests" (the fault
IMDS's GET /requests), "nodes" and "daemon_events" (a RunResult's). Violations may be dicts or
cnikit.check Violation objects; missing violations are judged from the history.
"""

from __future__ import annotations

import dataclasses
import json
import platform
from importlib import metadata
from pathlib import Path

from cnikit.errors import UsageError

SCHEMA_VERSION = "cnikit-report/1"
FIELDS = ("scenario", "profile", "seed", "verdict", "seconds", "violations", "warnings",
          "history", "imds_events", "audit", "versions")
VERDICTS = ("holds", "violation", "inconclusive", "error")
# Kept in report.json when a RunResult has them (cnikit.scenarios.engine).
EXTRAS = ("description", "expected", "error", "precondition", "exposure", "cost", "params",
          "nodes", "steps", "schedule", "daemon_views", "daemon_events", "imds_requests",
          "attempts")

# The shape of report.json, as a JSON Schema (draft 2020-12); tests validate against it.
SCHEMA = {
    "type": "object",
    "required": ["schema", "verdict", "violations", "warnings", "history", "seed", "profile",
                 "versions", "summary", "started", "ended"],
    "properties": {
        "schema": {"const": SCHEMA_VERSION},
        "scenario": {"type": ["string", "null"]},
        "profile": {"type": ["string", "null"]},
        "seed": {"type": ["integer", "null"]},
        "verdict": {"enum": list(VERDICTS)},
        "seconds": {"type": ["number", "null"]},
        "started": {"type": "number"},
        "ended": {"type": "number"},
        "summary": {"type": "array", "items": {"type": "string"}},
        "root_cause": {"type": "array", "items": {
            "type": "object", "required": ["text", "chains", "violations"],
            "properties": {"text": {"type": "string"},
                           "chains": {"type": "array", "items": {"type": "string"}},
                           "violations": {"type": "array", "items": {"type": "integer"}}}}},
        "coverage": {"type": "object", "required": ["classes", "pairs", "combinations",
                                                    "families"]},
        "violations": {"type": "array", "items": {"$ref": "#/$defs/violation"}},
        "warnings": {"type": "array", "items": {"$ref": "#/$defs/violation"}},
        "history": {"type": "array", "items": {
            "type": "object", "required": ["index", "time", "process", "type", "f"],
            "properties": {"index": {"type": "integer"}, "time": {"type": "number"},
                           "process": {"type": "string"}, "type": {"type": "string"},
                           "f": {"type": "string"}}}},
        "imds_events": {"type": "array", "items": {"type": "object", "required": ["type", "time"]}},
        "audit": {"type": "array", "items": {"type": "object", "required": ["time", "action"]}},
        "versions": {"type": "object", "required": ["cnikit", "moto", "boto3", "python", "kernel"],
                     "additionalProperties": {"type": ["string", "null"]}},
    },
    "$defs": {"violation": {
        "type": "object", "required": ["kind", "subject", "since"],
        "properties": {"kind": {"type": "string"}, "subject": {"type": "string"},
                       "since": {"type": "number"}, "until": {"type": ["number", "null"]},
                       "severity": {"type": "string"}, "detail": {"type": "object"},
                       "chain": {"type": "array", "items": {
                           "type": "object", "required": ["step", "time", "text"],
                           "properties": {
                               "step": {"enum": ["fault", "imds", "daemon", "ec2-call", "ec2",
                                                 "symptom"]},
                               "time": {"type": ["number", "null"]},
                               "at": {"type": ["string", "null"]},
                               "text": {"type": "string"},
                               "facts": {"type": "object"}}}}}}},
}


def versions() -> dict[str, str | None]:
    def v(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {"cnikit": v("cnikit"), "moto": v("moto"), "boto3": v("boto3"),
            "python": platform.python_version(), "kernel": platform.release()}


def _plain(x):
    """Violations, histories and audit records as JSON-ready dicts and lists."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [_plain(v) for v in x]
    if hasattr(x, "to_json"):
        return _plain(x.to_json())
    if hasattr(x, "entries") and callable(x.entries):  # a live History
        return _plain(x.entries())
    if dataclasses.is_dataclass(x):
        return _plain(dataclasses.asdict(x))
    return str(x)


def normalize(result) -> dict:
    """A RunResult or dict -> the report document's fields (without summary)."""
    if isinstance(result, dict):
        raw = dict(result)
    else:
        raw = {k: getattr(result, k) for k in FIELDS + EXTRAS if hasattr(result, k)}
        if not raw:
            raise UsageError(f"cannot report on a {type(result).__name__}: "
                             "expected a RunResult or a dict")
    doc = {k: _plain(raw.get(k)) for k in FIELDS}
    extras = {k: _plain(raw[k]) for k in EXTRAS if raw.get(k) not in (None, [], {})}
    if isinstance(doc.get("imds_events"), dict):  # GET /events answered as a whole
        doc["imds_events"] = doc["imds_events"].get("events", [])
    for k in ("history", "imds_events", "audit"):
        doc[k] = doc[k] or []
        if not isinstance(doc[k], list):
            raise UsageError(f"report field {k!r} must be a list, not {type(doc[k]).__name__}")
        # A collector's error note ({"error": ...}) is no record: keep it aside.
        bad = [x for x in doc[k] if not isinstance(x, dict) or "time" not in x]
        if bad:
            doc[k] = [x for x in doc[k] if isinstance(x, dict) and "time" in x]
            extras[f"{k}_unusable"] = bad[:10]
    if raw.get("violations") is None or raw.get("warnings") is None:
        from cnikit.check.invariants import judge

        inv = judge(doc["history"])
        if raw.get("violations") is None:
            doc["violations"] = [v.to_json() for v in inv.violations()]
        if raw.get("warnings") is None:
            doc["warnings"] = [v.to_json() for v in inv.warnings()]
    doc["violations"] = sorted(doc["violations"], key=lambda v: v.get("since") or 0)
    if doc.get("verdict") not in VERDICTS:
        doc["verdict"] = "violation" if doc["violations"] else "holds"
    doc["versions"] = {**versions(), **(doc.get("versions") or {})}
    if isinstance(doc.get("seed"), str) and doc["seed"].isdigit():
        doc["seed"] = int(doc["seed"])
    doc["extras"] = extras
    return doc


def build(result) -> tuple[dict, object]:
    """(report document, timeline) for a result."""
    from cnikit.check.cost import lines as cost_lines
    from cnikit.check.exposure import lines as exposure_lines
    from cnikit.report import cause, coverage, rootcause, summary, timeline
    from cnikit.report.held import why_held
    from cnikit.report.words import time_scale_sentence

    doc = normalize(result)
    extras = doc.pop("extras")
    requests = extras.get("imds_requests")
    if isinstance(requests, dict):  # GET /requests answered as a whole
        requests = extras["imds_requests"] = requests.get("requests", [])
    tl = timeline.build(doc["history"], doc["imds_events"], doc["audit"], doc["violations"],
                        extras.get("nodes"), requests if isinstance(requests, list) else None,
                        extras.get("daemon_events"))
    doc["summary"] = summary.summarize(tl, doc["verdict"], doc["violations"], doc["warnings"])
    exposure = extras.get("exposure") or {}
    if doc["verdict"] == "holds":
        doc["summary"].insert(1, why_held(tl, exposure))
    if doc["verdict"] == "inconclusive" and extras.get("precondition"):
        doc["summary"].insert(0, f"inconclusive: precondition not met: {extras['precondition']}")
    slowed = time_scale_sentence((extras.get("params") or {}).get("scale"),
                                 extras.get("attempts") or [])
    if slowed:
        doc["summary"].insert(0, slowed)
    if doc["verdict"] == "holds" and exposure and not exposure.get("exposed", True):
        doc["summary"].insert(0, "not exposed: none of the scenario's faults reached this build")
    doc["summary"] += exposure_lines(exposure) + cost_lines(extras.get("cost"))
    # Each violation carries its chain back to the first cause the record shows.
    doc["violations"] = [{**v, "chain": cause.to_json(tl, cause.chain(tl, v))}
                         for v in doc["violations"]]
    # The chains' facts in one plain sentence per cause (none when nothing was violated).
    doc["root_cause"] = rootcause.root_causes(tl, doc["violations"])
    doc["started"], doc["ended"] = tl.t0, tl.t1
    # Which faults were in effect at once (cnikit.report.coverage), from the nemesis's record.
    doc["coverage"] = coverage.coverage(doc["history"])
    ordered = {"schema": SCHEMA_VERSION}
    for k in ("scenario", "profile", "seed", "verdict", "seconds", "started", "ended", "summary",
              "root_cause", "violations", "warnings", "coverage", "versions"):
        ordered[k] = doc.get(k)
    ordered.update(extras)
    for k in ("history", "imds_events", "audit"):
        ordered[k] = doc.get(k)
    return ordered, tl


def dumps(doc: dict) -> str:
    """report.json: one top-level field a line, and a long list one record a line, so that
    it reads, greps and diffs well; each line is encoded by the C encoder (an indented
    json.dumps takes the pure-Python one, most of a long run's report time)."""
    def enc(v) -> str:
        return json.dumps(v, default=str, ensure_ascii=False)

    lines = []
    for k, v in doc.items():
        if isinstance(v, list) and v:
            body = ",\n  ".join(enc(x) for x in v)
            lines.append(f"{enc(k)}: [\n  {body}\n ]")
        else:
            lines.append(f"{enc(k)}: {enc(v)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"


def write_report(out_dir, result) -> dict[str, Path]:
    """Write report.json and report.html into out_dir (made if missing)."""
    from cnikit.report import html
    from cnikit.report.outdir import writable_dir

    out = writable_dir(out_dir)
    doc, tl = build(result)
    paths = {"json": out / "report.json", "html": out / "report.html"}
    paths["json"].write_text(dumps(doc))
    paths["html"].write_text(html.render(doc, tl))
    return paths
