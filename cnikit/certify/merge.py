"""`cnikit report merge DIR... --out DIR`: the shards of one certification (`--shard I/N`
on several CI runners) joined into one certificate, one index report, one JUnit file and
one exit code, as if one runner had made every run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from cnikit.errors import UsageError


def _read(d: Path, name: str, schema: str) -> dict:
    """A shard's certificate.json or matrix.json; one line naming the file when it is not."""
    path = d / name
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e})") from None
    if doc.get("schema") != schema:
        raise UsageError(f"{path}: not a {schema} document")
    return doc


SHARD_FILES = {"certificate.json": "cnikit certify", "matrix.json": "cnikit matrix"}


def shard_kind(dirs: list[Path]) -> str:
    """Which shards the directories hold, "certificate.json" or "matrix.json" (one kind for
    all); one line naming the first directory that holds none, or the mix."""
    kinds = {}
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"{d}: no such directory")
        found = [name for name in SHARD_FILES if (d / name).is_file()]
        if not found:
            raise UsageError(f"no shards found in {d}: it has no "
                             + " or ".join(f"{n} ({c})" for n, c in SHARD_FILES.items())
                             + _nested(d))
        kinds[d] = found[0]
    if len(set(kinds.values())) > 1:
        cert = next(d for d, k in kinds.items() if k == "certificate.json")
        matrix = next(d for d, k in kinds.items() if k == "matrix.json")
        raise UsageError(f"{cert} holds a certification shard and {matrix} a matrix shard: "
                         "merge shards of one kind")
    return next(iter(kinds.values()))


def _nested(d: Path) -> str:
    """A hint when the shards are one level down (a CI artifact download, say)."""
    below = sorted(str(sub) for sub in d.iterdir() if sub.is_dir()
                   and any((sub / name).is_file() for name in SHARD_FILES))
    if not below:
        return ""
    return f"; its subdirectories {' '.join(below)} hold shards: pass those"


def _load(d: Path) -> dict:
    from cnikit.certify.certificate import SCHEMA_VERSION

    return _read(d, "certificate.json", SCHEMA_VERSION)


def _identity(doc: dict) -> tuple:
    """What every shard must share: the same build (files by hash, its identity), kit and
    runtime."""
    t = doc["target"]
    files = tuple(sorted((f["role"], f["sha256"]) for f in doc["files"]))
    return (t["name"], t["version"], t.get("image_digest"), files, doc.get("identity"),
            doc["kit"]["version"], doc["kit"].get("git_commit"), doc["runtime"])


def merge(dirs: list[Path], out: Path) -> dict:
    from cnikit.certify import certificate, index, junit
    from cnikit.certify.suite import Certification

    docs = [(d, _load(d)) for d in dirs]
    first_dir, first = docs[0]
    for d, doc in docs[1:]:
        if _identity(doc) != _identity(first):
            raise UsageError(f"{d} certifies another build, kit or runtime than {first_dir}: "
                             "shards of one certification only")
    out.mkdir(parents=True, exist_ok=True)
    runs, seen = [], {}
    for d, doc in docs:
        for r in doc["runs"]:
            key = (r["scenario"], r["seed"])
            if key in seen:
                raise UsageError(f"{r['scenario']} seed {r['seed']} is in both {seen[key]} and {d}")
            seen[key] = d
            if r.get("report"):  # links relative to the merged index
                r = {**r, "report": os.path.relpath(d / r["report"], out)}
            runs.append(r)
    runs.sort(key=lambda r: (r["scenario"], r["seed"]))

    cert = Certification(None, runs=runs)
    doc = {**first, "runs": runs, "verdict": cert.verdict, "shard": None,
           "merged_from": [str(d) for d, _ in docs],
           "started": min(x["started"] for _, x in docs),
           "ended": max(x["ended"] for _, x in docs),
           "seconds": round(max(x["seconds"] for _, x in docs), 1)}
    doc["summary"] = certificate.summary(cert)
    certificate.write(out, doc)
    index.write(out, doc)
    junit.write(out / "junit.xml", doc)
    return doc


# ---- matrix shards (cnikit matrix --shard I/N) ------------------------------------------------

def _load_matrix(d: Path) -> dict:
    from cnikit.scenarios.matrix import MATRIX_SCHEMA

    return _read(d, "matrix.json", MATRIX_SCHEMA)


def merge_matrices(dirs: list[Path], out: Path) -> dict:
    """The cells of matrix shards joined: the table one unsharded `cnikit matrix` makes."""
    from cnikit.scenarios.matrix import cell_of, write_matrix

    columns: list[str] = []
    runs: dict[tuple[str, str], list[dict]] = {}
    expected: dict[tuple[str, str], str | None] = {}
    seen: dict[tuple, Path] = {}
    for d in dirs:
        doc = _load_matrix(d)
        columns += [c for c in doc["columns"] if c not in columns]
        for name, row in doc["cells"].items():
            for col, cell in row.items():
                expected[(name, col)] = cell.get("expected")
                for r in cell["runs"]:
                    key = (name, col, r["seed"])
                    if key in seen:
                        raise UsageError(f"{name} [{col}] seed {r['seed']} is in both "
                                         f"{seen[key]} and {d}")
                    seen[key] = d
                    runs.setdefault((name, col), []).append(r)
    cells: dict = {}
    for (name, col) in sorted(runs):
        cell_runs = sorted(runs[(name, col)], key=lambda r: r["seed"])
        cells.setdefault(name, {})[col] = cell_of(cell_runs, expected[(name, col)])
    write_matrix(out, cells, columns)
    _matrix_junit(out / "junit.xml", cells)
    return {"columns": columns, "cells": cells}


def _matrix_junit(path: Path, cells: dict) -> None:
    import xml.etree.ElementTree as ET

    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", {"name": "cnikit matrix"})
    n = failures = 0
    for name, row in cells.items():
        for col, cell in row.items():
            for r in cell["runs"]:
                n += 1
                case = ET.SubElement(suite, "testcase", {"classname": col, "name": f"{name}[seed{r['seed']}]",
                                                         "time": f"{r['seconds']:.2f}"})
                want = cell.get("expected")
                if want is not None and r["verdict"] != want:
                    failures += 1
                    ET.SubElement(case, "failure", {"message": f"{r['verdict']}, expected {want}"}
                                  ).text = "\n".join(r.get("evidence") or [])
    suite.set("tests", str(n))
    suite.set("failures", str(failures))
    tree = ET.ElementTree(suites)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)


@click.group("report")
def report_group() -> None:
    """Reports of several runs."""


@report_group.command("merge")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="where the merged certificate.json, report.html and junit.xml go")
def merge_cmd(dirs, out) -> None:
    """Join the report directories of shards (of `cnikit certify` or `cnikit matrix`): exit 0
    every run as it should be, 1 a violation (a verdict not the expected one, for a matrix),
    2 a run that could not complete, a directory without shards, or shards that do not fit
    together."""
    from cnikit.certify.suite import Certification

    if shard_kind(list(dirs)) == "matrix.json":
        from rich.console import Console

        from cnikit.scenarios.cli.matrix import _table
        from cnikit.scenarios.matrix import matrix_ok

        m = merge_matrices(list(dirs), out)
        Console().print(_table(m["cells"], m["columns"]))
        click.echo(f"matrix of {len(dirs)} shards: {out / 'matrix.json'}")
        sys.exit(0 if matrix_ok(m["cells"]) else 1)
    doc = merge(list(dirs), out)
    s = doc["summary"]
    click.echo(f"{doc['target']['name']} {doc['target']['version']}: {doc['verdict'].upper()} - "
               f"{s['runs']} runs from {len(dirs)} shards: {s['holds']} held, {s['violation']} "
               f"violated, {s['inconclusive']} inconclusive, {s['error']} could not complete")
    click.echo(f"report: {out / 'report.html'}")
    sys.exit(Certification(None, runs=doc["runs"]).exit_code)
