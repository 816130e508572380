"""The self-contained HTML report: inline CSS and the chart as inline SVG (cnikit.report.chart,
drawn for each of a few widths, of which the window shows the one it fits), no script, no
external resource, so it opens offline and in any mail or CI artifact viewer.

Top to bottom: the summary, the root cause (each violation's chain from cnikit.report.cause,
violations sharing every cause as one chain), the legend, the chart, the tables.
"""

from __future__ import annotations

from cnikit.report.chart import render_svg
from cnikit.report.held import PREFIX as HELD
from cnikit.report.legend import legend_rows
from cnikit.report.rootcause import chain_groups
from cnikit.report.svg import MAX_ZOOM, WIDTH, WIDTHS, esc
from cnikit.report.timeline import Timeline, fmt
from cnikit.report.words import rel

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px}
h3{font-size:14px;margin:12px 0 4px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600}
.holds{background:#2e7d32} .violation{background:#c62828} .error{background:#6d4c41}
.inconclusive{background:#8d6e00}
p.err{color:#6d4c41;font-weight:600}
.meta{color:#555} ul.summary li{margin:3px 0} ul.summary li.v{color:#b71c1c}
.legend span{display:inline-block;margin:0 14px 4px 0} .legend i{display:inline-block;width:14px;
height:12px;vertical-align:-1px;margin-right:5px;border-radius:2px}
svg.timeline{font:12px system-ui,Helvetica,Arial,sans-serif;background:#fff;width:100%;
height:auto;display:block}
%(widths)s
@media (max-width:%(narrow)spx){body{margin:12px}}
svg .flbl{fill:#4a3b00;font-size:11px}
svg .lbl{fill:#222} svg .seg{fill:#222;font-size:11px;pointer-events:none}
svg .seg.on-dark{fill:#fff}
svg .lane{fill:#f6f6f6} svg .shade{fill:#edc948;opacity:.16} svg .grid{stroke:#ddd}
svg .tick{fill:#666;text-anchor:middle;font-size:11px}
svg .vnum{fill:#fff;text-anchor:middle;font-weight:700;font-size:11px}
svg .fault .seg,svg .absent .seg{fill:#4a3b00}
table{border-collapse:collapse;margin:4px 0} td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top;font-size:13px} th{background:#f3f3f3}
.scroll{overflow-x:auto} code{font-size:12px} .nw{white-space:nowrap}
table.chain td{border:0;border-bottom:1px solid #eee;padding:2px 8px 2px 0}
.at{color:#555;white-space:nowrap;font-variant-numeric:tabular-nums}
.tag{font-size:11px;font-weight:600;text-transform:uppercase;white-space:nowrap;color:#555} .tag.fault{color:#8a6d00} .tag.imds{color:#3b7d32} .tag.daemon{color:#6a4c93}
.tag.ec2-call,.tag.ec2{color:#2f5d8a} .tag.symptom{color:#b71c1c}
p.root{font-size:15px;border-left:4px solid #c62828;padding:6px 10px;background:#fdf3f3;margin:10px 0}
p.root.held{border-left-color:#2e7d32;background:#f1f8f1}
dl.terms{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:4px 0}
dl.terms dt{font-weight:600} dl.terms dd{margin:0}
"""


def _width_css() -> str:
    """Each drawing between its width and MAX_ZOOM times it; a window shows the widest
    drawing it holds at 1:1 (beside 20px margins and a 15px scrollbar)."""
    css = [f"svg.w{w}{{min-width:{w}px;max-width:{round(w * MAX_ZOOM)}px}}" for w in WIDTHS]
    for w in WIDTHS[1:]:
        css.append(f".chart.w{w}{{display:none}}")
    for narrow, wide in zip(WIDTHS, WIDTHS[1:], strict=False):
        # From where the narrower drawing, at its largest, would leave the window's side empty.
        css.append(f"@media (min-width:{round(narrow * MAX_ZOOM) + 2 * 20 + 15}px){{"
                   f".chart.w{wide}{{display:block}}.chart.w{narrow}{{display:none}}}}")
    return "\n".join(css)


CSS = CSS.replace("%(widths)s", _width_css()).replace("%(narrow)s", str(WIDTH + 2 * 20 + 60))


def render(doc: dict, tl: Timeline) -> str:
    verdict = doc.get("verdict", "?")
    violations = doc.get("violations") or []
    title = f"cnikit report: {doc.get('scenario') or 'run'} / {doc.get('profile') or '?'}"
    scale = (doc.get("params") or {}).get("scale")
    meta = (f"seed {esc(doc.get('seed'))} \u00b7 {tl.t1 - tl.t0:.1f}s recorded"
            + (f" \u00b7 run took {doc['seconds']:.1f}s" if isinstance(doc.get("seconds"), (int, float)) else "")
            + f" \u00b7 {len(tl.pods)} pods \u00b7 {len(tl.enis)} ENIs \u00b7 {len(tl.faults)} faults"
            + (f" \u00b7 time scale {scale:g}" if isinstance(scale, (int, float)) else ""))
    groups = chain_groups(violations)
    letter = {n: g["name"] for g in groups for n in g["violations"]}
    summary = "".join(
        f'<li class="{"v" if n < len(violations) else ""}">'
        + (f"<b>#{n + 1}</b> " if n < len(violations) else "")
        + esc(line.split("; root cause: ")[0])
        + (f' <a href="#cause-{letter[n + 1]}">(root cause: chain {letter[n + 1]})</a>'
           if n + 1 in letter else "") + "</li>"
        for n, line in enumerate(doc.get("summary") or []) if not line.startswith(HELD))
    legend = "".join(f'<span><i style="background:{c}"></i>{esc(t)}</span>'
                     for c, t in legend_rows())
    vrows = "".join(
        f"<tr><td>{n}</td><td class=\"nw\">{esc(v.get('kind'))}</td>"
        f"<td class=\"nw\">{esc(v.get('subject'))}</td>"
        f"<td class=\"nw\">{esc(rel(tl, v.get('since')))}</td>"
        f"<td class=\"nw\">{esc(rel(tl, v.get('until')))}</td>"
        f"<td><code>{_unbroken(_compact(v.get('detail')))}</code></td></tr>"
        for n, v in enumerate(violations, 1))
    frows = "".join(
        f"<tr><td class=\"nw\">{esc(f.source)}</td><td>{_unbroken(f.label)}</td>"
        f"<td class=\"nw\">{esc(rel(tl, f.start))}</td>"
        f"<td class=\"nw\">{esc('' if f.instant else rel(tl, f.end))}</td></tr>"
        for f in tl.faults)
    srows = "".join(
        f"<tr><td>{n}</td><td class=\"nw\">{esc(rel(tl, st.start))}</td><td>{esc(st.label)}</td></tr>"
        for n, st in enumerate(tl.steps, 1))
    crows = "".join(
        f"<tr><td>{esc(' + '.join(c['faults']))}</td><td>{_seconds(c['seconds'])}</td>"
        f"<td>{c['times']}</td></tr>"
        for c in ((doc.get("coverage") or {}).get("pairs") or []))
    families = ", ".join(f"{esc(k)} {_seconds(v)}" for k, v in
                         ((doc.get("coverage") or {}).get("families") or {}).items())
    error = (f'<p class="err">the run stopped with an error: {esc(doc["error"])}</p>'
             if doc.get("error") else "")
    versions = " \u00b7 ".join(f"{esc(k)} {esc(v)}" for k, v in (doc.get("versions") or {}).items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{CSS}</style></head><body>
<h1>{esc(title)} <span class="verdict {esc(verdict)}">{esc(verdict)}</span></h1>
<div class="meta">{meta}</div>
{f'<p>{esc(doc["description"])}</p>' if doc.get("description") else ""}{error}
{_root(doc)}{_held(doc)}
<h2>Summary</h2><ul class="summary">{summary}</ul>
{_causes(tl, groups)}
{_terms(doc, tl)}
<h2>Timeline</h2>
<div class="legend">{legend}</div>
<p class="meta">Per ENI: its secondary IPs and prefixes as each view saw them (the ENI's own
primary IP left out). A number is the count; hover a segment for its IPs. Times are seconds
from the first record.</p>
{"".join(f'<div class="scroll chart w{w}">{render_svg(tl, violations, w)}</div>' for w in WIDTHS)}
<h2>Violations</h2>
{f'<table><tr><th>#</th><th>kind</th><th>subject</th><th>since</th><th>until</th><th>detail</th></tr>{vrows}</table>' if vrows else '<p>none</p>'}
{f'<h2>Scenario steps</h2><table><tr><th>#</th><th>at</th><th>step</th></tr>{srows}</table>' if srows else ''}
<h2>Faults</h2>
{f'<table><tr><th>source</th><th>fault</th><th>from</th><th>to</th></tr>{frows}</table>' if frows else '<p>none</p>'}
{f'<h2>Fault combinations</h2><p class="meta">Faults in effect at once: for how many seconds they overlapped and how many times they met. An instant act (EC2 moving an address) meets whatever was in effect at that moment and lasts no time: "instant". By family: {families or "none"}.</p><table><tr><th>faults</th><th>seconds</th><th>times</th></tr>{crows}</table>' if crows else ''}
<p class="meta">{versions}</p>
</body></html>
"""


# What a detail without a value means, where "none" alone would leave the reader guessing.
UNSET = {"held_by": "no instance (EC2 gives the address to none)"}


def _compact(d) -> str:
    """A violation's detail as "key: value" pairs, values as a person reads them."""
    if not d:
        return ""
    return " \u00b7 ".join(
        f"{str(k).replace('_', ' ')}: {UNSET.get(k, 'none') if v is None else fmt(v)}"
        for k, v in d.items())


def _unbroken(text: str) -> str:
    """Escaped text that wraps only at spaces: a browser also breaks after a hyphen, which
    cuts names like ck-4d923-n0-p7 or ip-not-owned in two."""
    return " ".join(f'<span class="nw">{esc(w)}</span>' if "-" in w else esc(w)
                    for w in text.split(" "))


def _seconds(s: float) -> str:
    return "instant" if s == 0 else f"{s:.2f}s"


def _root(doc: dict) -> str:
    """The root cause in plain words, first thing under the title."""
    causes = doc.get("root_cause") or []
    out = []
    for rc in causes:
        where = ", ".join(f'<a href="#cause-{esc(c)}">chain {esc(c)}</a>' for c in rc["chains"])
        if len(causes) > 1:
            nums = ", ".join(f"#{n}" for n in rc["violations"])
            where = f"violations {nums}" + (f"; {where}" if where else "")
        out.append(f'<p class="root"><b>Root cause:</b> {esc(rc["text"])}.'
                   + (f' <span class="meta">({where})</span>' if where else "") + "</p>")
    return "\n".join(out)


def _held(doc: dict) -> str:
    """Why a run held, in the root cause's place (cnikit.report.held)."""
    why = next((x for x in doc.get("summary") or [] if x.startswith(HELD)), None)
    if why is None:
        return ""
    return f'<p class="root held"><b>Why it held:</b> {esc(why.removeprefix(HELD))}.</p>'


# Terms the page uses, each explained once (only those the page shows).
TERMS = [
    ("ENI", "elastic network interface: a network card EC2 attaches to an instance; it holds "
            "the instance's private addresses, one primary and any number of secondary ones"),
    ("IMDS", "instance metadata service: what a node reads about itself, its ENIs and their "
             "addresses; it follows EC2 with a delay, and a scenario may fault it"),
    ("local-ipv4s", "the IMDS entry listing an ENI's private IPv4 addresses "
                    "(network/interfaces/macs/<mac>/local-ipv4s), its primary one included"),
    ("datastore", "the daemon's own record of the addresses it holds on each ENI and which "
                  "pod has each; an address it drops from there is free to give another pod"),
    ("warm pool", "addresses the daemon holds on its ENIs before any pod asks, so that a new "
                  "pod gets one at once"),
    ("reconcile", "the daemon's periodic comparison of its datastore with IMDS (and EC2), "
                  "adding and dropping addresses to match"),
]


def _terms(doc: dict, tl: Timeline) -> str:
    said = " ".join([*(doc.get("summary") or []), *(rc["text"] for rc in doc.get("root_cause") or []),
                     *(st.label for st in tl.steps), *(f.label for f in tl.faults),
                     *(x["text"] for v in doc.get("violations") or [] for x in v.get("chain") or []),
                     "ENI IMDS datastore"])  # the chart's lanes name these three
    rows = "".join(f"<dt>{esc(t)}</dt><dd>{esc(d)}</dd>" for t, d in TERMS if t in said)
    return f'<h2>Terms</h2><dl class="terms">{rows}</dl>' if rows else ""


def _causes(tl: Timeline, groups: list[dict]) -> str:
    if not groups:
        return ""

    def row(x: dict, first: str = "") -> str:
        at = rel(tl, x["time"]) if x.get("time") is not None else ""
        text = x["text"].removeprefix("fault: ")
        return (f'<tr><td class="at">{esc(at)}</td><td class="tag {esc(x["step"])}">'
                f'{esc(x["step"].replace("-", " "))}</td><td>{first}{esc(text)}</td></tr>')

    out = ['<h2>Root cause</h2><p class="meta">Each chain runs from the first cause the record '
           'shows to the violations it explains, built from the record alone: the faults, what '
           'IMDS served the node, what its daemon did (with its own log of decisions when the '
           'build keeps one), what EC2 did, what the checkers saw.</p>']
    for g in groups:
        nums = ", ".join(f"#{n}" for n in g["violations"])
        rows = [row(x) for x in g["links"]]
        # EC2's reaction once per address, then each violation's symptom.
        reactions: dict[tuple, list[int]] = {}
        for n, links in g["ends"]:
            for x in links:
                if x["step"] == "ec2":
                    reactions.setdefault((x["time"], x["text"]), []).append(n)
        for (t, text), ns in sorted(reactions.items()):
            rows.append(row({"step": "ec2", "time": t,
                             "text": f"{text} ({', '.join(f'#{n}' for n in ns)})"}))
        for n, links in sorted(g["ends"], key=lambda e: [x["time"] for x in e[1]][-1:]):
            rows += [row(x, f"<b>#{n}</b> ") for x in links if x["step"] == "symptom"]
        out.append(f'<h3 id="cause-{g["name"]}">Chain {g["name"]}: violations {nums}</h3>'
                   f'<table class="chain">{"".join(rows)}</table>')
    return "\n".join(out)
