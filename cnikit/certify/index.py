"""report.html of a certification: the verdict table, each run linked to its own report."""

from __future__ import annotations

from html import escape
from pathlib import Path

COLOURS = {"holds": "#1a7f37", "violation": "#cf222e", "inconclusive": "#9a6700",
           "error": "#6e7781"}
HEADLINE = {"certified": "certified: every run held",
            "failed": "failed: an invariant was violated",
            "incomplete": "incomplete: a run could not be completed",
            "insufficient": ("insufficient: too few runs exercised the build to certify it, "
                             "or the machine was too slow for one")}

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:68rem;padding:0 1rem;color:#1f2328}
h1{font-size:1.4rem;margin:0 0 .3rem}
.v{font-weight:600}
table{border-collapse:collapse;width:100%;margin-top:1rem}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #d0d7de;vertical-align:top}
th{background:#f6f8fa}
td.ev{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;max-width:34rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;margin:.8rem 0}
dt{color:#59636e}
code{font-size:12px}
"""


def label(verdict: str, exposure: dict) -> str:
    from cnikit.check.exposure import label as run_label

    return run_label(verdict, exposure)


def _cell(verdict: str) -> str:
    return f'<span class="v" style="color:{COLOURS.get(verdict, "#1f2328")}">{escape(verdict)}</span>'


def render(doc: dict) -> str:
    from cnikit.check.cost import lines as cost_lines
    from cnikit.check.exposure import lines as exposure_lines
    from cnikit.report.words import time_scale_sentence

    t, kit, s = doc["target"], doc["kit"], doc["summary"]
    colour = {"certified": COLOURS["holds"], "failed": COLOURS["violation"]}.get(doc["verdict"],
                                                                               COLOURS["error"])
    rows = []
    for r in doc["runs"]:
        link = (f'<a href="{escape(r["report"])}">report</a>' if r.get("report") else "")
        notes = list(r.get("evidence") or [])
        if r.get("precondition"):
            notes.insert(0, f"precondition not met: {r['precondition']}")
        if r.get("error") and r["verdict"] == "error":
            notes.insert(0, r["error"])
        slowed = time_scale_sentence(r.get("scale"), r.get("attempts") or [])
        if slowed:
            notes.insert(0, slowed)
        exposure = r.get("exposure") or {}
        notes += exposure_lines(exposure) + cost_lines(r.get("cost"))
        expected = r.get("expected") or "holds"
        exp = "" if expected == r["verdict"] else f" (expected {escape(expected)})"
        shown = label(r["verdict"], exposure)
        rows.append(f"<tr><td>{escape(r['scenario'])}</td><td>{r['seed']}</td>"
                    f"<td>{_cell(r['verdict'])}{exp}"
                    f"{'' if shown == r['verdict'] else ' (' + escape(shown) + ')'}</td>"
                    f"<td>{r['seconds']:.1f}s</td>"
                    f"<td>{link}</td><td class=ev>{escape(chr(10).join(notes))}</td></tr>")
    files = "".join(f"<dt>{escape(f['role'])}</dt><dd><code>{escape(f['path'])}</code> "
                    f"sha256 <code>{f['sha256']}</code></dd>" for f in doc["files"])
    image = (f"<dt>image</dt><dd><code>{escape(t['image'])}</code> "
             f"{escape(t.get('image_digest') or '')}</dd>" if t.get("image") else "")
    commit = kit.get("git_commit") or "not from a checkout"
    if kit.get("git_dirty"):
        commit += " (with local changes)"
    counts = ", ".join(f"{s[k]} {k}" for k in ("holds", "violation", "inconclusive", "error") if s[k])
    return f"""<!doctype html><html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width,initial-scale=1">
<title>cnikit certify {escape(t['name'])} {escape(t['version'])}</title><style>{STYLE}</style></head>
<body><h1>{escape(t['name'])} {escape(t['version'])}:
<span style="color:{colour}">{escape(HEADLINE[doc['verdict']])}</span></h1>
<div>{s['runs']} runs ({counts}); {s['exercised']} exercised the build, {s.get('exposed', 0)} of
them exposed to their faults and {s.get('not_exposed', 0)} held without being exposed;
{doc['seconds']:.0f}s</div>
<dl><dt>target</dt><dd>{escape(t.get('source') or 'built-in')}</dd>{image}{files}
<dt>kit</dt><dd>cnikit {escape(kit['version'])}, {escape(commit)}</dd>
<dt>machine</dt><dd>kernel {escape(doc['machine']['kernel'])}, {doc['machine']['cores']} cores;
runtime {escape(doc['runtime'])}</dd>
<dt>started</dt><dd>{escape(doc['started'])} (ended {escape(doc['ended'])})</dd></dl>
<table><thead><tr><th>scenario</th><th>seed</th><th>verdict</th><th>time</th><th></th>
<th>evidence</th></tr></thead><tbody>{''.join(rows)}</tbody></table></body></html>
"""


def write(out_dir: Path, document: dict) -> Path:
    path = Path(out_dir) / "report.html"
    path.write_text(render(document))
    return path
