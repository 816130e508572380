"""JUnit XML for CI systems: one testcase per scenario x seed, classname = the target.

A violation is a <failure>, a run the kit could not complete an <error>, an inconclusive run
(an unmet precondition) is <skipped> with the precondition as its message. Each testcase's
`label` property says exposed or not exposed, and its <system-out> what of the run's faults
reached the build (cnikit.check.exposure).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def build(document: dict) -> ET.Element:
    runs = document["runs"]
    target = document["target"]["name"]
    s = document["summary"]
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", {
        "name": f"cnikit certify {target}", "tests": str(len(runs)),
        "failures": str(s["violation"]), "errors": str(s["error"]),
        "skipped": str(s["inconclusive"]), "time": f"{document['seconds']:.1f}",
        "timestamp": document["started"]})
    for r in runs:
        case = ET.SubElement(suite, "testcase", {
            "classname": target, "name": f"{r['scenario']}[seed{r['seed']}]",
            "time": f"{r['seconds']:.2f}"})
        props = ET.SubElement(case, "properties")
        for k in ("seed", "report", "run_id", "label"):
            if r.get(k) is not None:
                ET.SubElement(props, "property", {"name": k, "value": str(r[k])})
        # What of the run's faults reached the build: a held run that was not exposed passes,
        # and says so where a CI system shows a testcase's output.
        lines = [f["line"] for f in (r.get("exposure") or {}).get("faults") or []]
        lines += [f"adapted: {a}" for a in (r.get("exposure") or {}).get("adapted") or []]
        if lines:
            ET.SubElement(case, "system-out").text = "\n".join(lines)
        evidence = "\n".join(r.get("evidence") or [])
        if r["verdict"] == "violation":
            first = (r.get("evidence") or ["invariant violated"])[0]
            ET.SubElement(case, "failure", {"message": first, "type": "violation"}).text = evidence
        elif r["verdict"] == "error":
            ET.SubElement(case, "error", {"message": r.get("error") or "could not complete",
                                          "type": "error"}).text = evidence
        elif r["verdict"] == "inconclusive":
            ET.SubElement(case, "skipped",
                          {"message": f"inconclusive: {r.get('precondition') or 'precondition unmet'}"})
    return suites


def write(path: str | Path, document: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(build(document))
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
