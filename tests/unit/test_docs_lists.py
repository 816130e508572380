"""The docs' lists checked against the registries: the matrix tables and the scenario sections
of docs/scenarios.md, the cost table of docs/certify.md and the kinds table of
fault_imds/README.md. A new scenario, cost rule or IMDS fault kind is one file of code; its
lines in the docs are what these tests ask for, by name, with the line to add."""

from __future__ import annotations

import re
from pathlib import Path

from cnikit import scenarios
from cnikit.check.cost import RULES
from cnikit.daemon import profiles
from fault_imds.faults import KINDS as IMDS_FAULTS

ROOT = Path(__file__).resolve().parents[2]
NOT_ASSERTED = "not asserted"


def tables(doc: str, first: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of `doc` whose first header cell is `first`: (header, rows), each
    row its cells, backquotes taken off."""
    out: list[tuple[list[str], list[list[str]]]] = []
    rows: list[list[str]] | None = None
    for line in (ROOT / doc).read_text().splitlines():
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if rows is None:
            rows = []
            if cells[0] == first:
                out.append((cells, rows))
        elif not set(line) <= set("|-: "):
            rows.append(cells)
    return out


def first_column(doc: str, first: str) -> list[str]:
    return [row[0] for _, rows in tables(doc, first) for row in rows]


def missing_and_stale(documented: list[str], registered: list[str]) -> tuple[list, list]:
    return ([n for n in registered if n not in documented],
            sorted(set(documented) - set(registered)))


def verdict(profile: str, scenario: str) -> str:
    return profiles.get(profile).expected_verdict(scenario) or NOT_ASSERTED


def test_the_matrix_tables_list_every_scenario_with_its_expected_verdicts():
    doc = "docs/scenarios.md"
    found = {row[0]: dict(zip(header[1:], row[1:], strict=False))
             for header, rows in tables(doc, "scenario") for row in rows}
    missing, stale = missing_and_stale(list(found), scenarios.names())
    rows = []
    for name in missing:
        family = scenarios.get(name).family
        rows.append(f"the {family} table: | {name} | "
                    + " | ".join(verdict(p, name) for p in profiles.names(family)) + " |")
    assert not missing, f"{doc}: add to the matrix tables (a column per profile):\n" + \
        "\n".join(rows)
    assert not stale, f"{doc}: remove the matrix rows of {stale}: no scenario has that name"
    for name, cells in found.items():
        family = scenarios.get(name).family
        assert list(cells) == profiles.names(family), (
            f"{doc}: the {family} matrix table's columns are {list(cells)}, the profiles run "
            f"in {family} are {profiles.names(family)}: give each one its column")
    wrong = [f"{name} on {p}: the doc says {said!r}, its profile expects {verdict(p, name)!r}"
             for name, cells in found.items() for p, said in cells.items()
             if said != verdict(p, name)]
    assert not wrong, f"{doc}: the matrix tables disagree with the profiles: {wrong}"


def test_every_scenario_has_its_paragraph():
    doc = "docs/scenarios.md"
    described = re.findall(r"^- \*\*([a-z0-9-]+)\*\*", (ROOT / doc).read_text(), re.M)
    missing, stale = missing_and_stale(described, scenarios.names())
    assert not missing, (f"{doc}: add a paragraph for each of {missing} to 'What each "
                         "scenario does, and why the verdicts' (or 'The IPv6 scenarios'): "
                         "'- **<name>** (<upstream issue>): what it does; why each profile "
                         "reaches its verdict'")
    assert not stale, f"{doc}: the paragraphs of {stale} describe no scenario"


def test_the_cost_table_lists_every_rule():
    doc = "docs/certify.md"
    missing, stale = missing_and_stale(first_column(doc, "finding"), sorted(RULES))
    assert not missing, (f"{doc}: add a row to the cost table ('Cost') for each of {missing}: "
                         "'| `<kind>` | when it is found |'")
    assert not stale, f"{doc}: the cost table lists {stale}, which no rule is"


def test_the_imds_readme_lists_every_fault_kind():
    doc = "fault_imds/README.md"
    missing, stale = missing_and_stale(first_column(doc, "kind"), list(IMDS_FAULTS))
    assert not missing, (f"{doc}: add a row to the kinds table for each of {missing}: "
                         "'| `<kind>` | its attributes | its effect |'")
    assert not stale, f"{doc}: the kinds table lists {stale}, which no kind is"


def test_the_init_template_names_every_placeholder(tmp_path):
    from cnikit.certify import template
    from cnikit.targets.loader import load_target
    from cnikit.targets.model import PLACEHOLDERS

    path = template.write(tmp_path / "t.toml")
    comment = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert [p for p in PLACEHOLDERS if f"{{{p}}}" not in comment] == []
    assert load_target(path).name == "cnikit-reference"
