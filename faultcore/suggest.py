"""The did-you-mean of a refused name: the closest known name, when one is close."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """"; did you mean 'X'?" for the known name closest to `word`, or "" when none is close
    enough to be the name meant. Case is ignored in the comparison (a typo of case is the
    commonest: describeInstances), but the suggestion is spelled as known."""
    by_folded = {}
    for name in known:
        by_folded.setdefault(name.casefold(), name)
    close = difflib.get_close_matches(word.casefold(), by_folded, n=1, cutoff=0.6)
    return f"; did you mean {by_folded[close[0]]!r}?" if close else ""
