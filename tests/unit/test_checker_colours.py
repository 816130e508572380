"""A checker's colour is checked when the checker registers: one a reader could not tell
from a colour the timeline already draws is refused there, naming that colour and whose it
is."""

from __future__ import annotations

import pytest

from cnikit.check.checkers import CHECKERS, Checker, checker_of
from cnikit.check.palette import C_FAULT, ColourClash


def define(kind: str, colour: str) -> type[Checker]:
    return type("Throwaway", (Checker,), {"kind": kind, "colour": colour, "legend": kind})


@pytest.fixture
def forget():
    kinds: list[str] = []
    yield kinds.append
    for k in kinds:
        CHECKERS.pop(k, None)


def test_a_colour_close_to_the_kits_is_refused_at_registration(forget):
    forget("colour-near-fault")
    with pytest.raises(ColourClash) as e:
        define("colour-near-fault", "#e8c64f")
    msg = str(e.value)
    assert "checker 'colour-near-fault'" in msg and f"{C_FAULT} (fault)" in msg, msg
    assert "\n" not in msg and e.value.exit_code == 2
    assert "colour-near-fault" not in CHECKERS


def test_a_colour_close_to_another_checkers_is_refused_naming_it(forget):
    forget("colour-near-shared")
    shared = checker_of("shared-ip").colour
    near = "#2c7070"
    with pytest.raises(ColourClash, match=f"too close to {shared} \\(checker 'shared-ip'\\)"):
        define("colour-near-shared", near)


def test_a_colour_not_in_hex_is_refused(forget):
    forget("colour-by-name")
    with pytest.raises(ColourClash, match="'olive' is not of the form #rrggbb"):
        define("colour-by-name", "olive")


def test_a_distinct_colour_registers_and_leaves_with_its_checker(forget):
    forget("colour-distinct")
    define("colour-distinct", "#123456")
    assert CHECKERS["colour-distinct"].colour == "#123456"
    CHECKERS.pop("colour-distinct")
    define("colour-distinct-again", "#123456")  # the colour is free once its checker left
    forget("colour-distinct-again")
