"""One way to register things by name, for every kind of thing the kit lets a file add.

Fault kinds and stages (faultcore.fault.Kinds), nemesis actions, checkers, cost rules,
scenarios, daemon profiles and the gate's modelled EC2 actions each keep one `Registry`.
An item joins by being defined in its own file (a class with a name, a decorated function,
a module's PROFILE); every consumer reads the registry, so nothing else lists it.

A name is one thing: a second file defining a name already taken is refused, and the error
names both files. The same definition registered again (its module imported a second time)
replaces the first.

Names are spelled with hyphens (`describe-lag`, `restart-all`). Fault kinds were once
spelled with underscores (`describe_lag`); `canonical` maps that old spelling to the name,
here and nowhere else, so every place a user may still send it (a control API, a command
line, a fixture's argument, a report an older version wrote) takes it, and `renamed` is the
one-line deprecation note its answer carries.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from faultcore.errors import OneLineError, SpecError

T = TypeVar("T")


class DuplicateName(OneLineError):
    """A name registered by two definitions (one line, naming both files)."""


class BadSpelling(OneLineError):
    """A name with an underscore: names users type are spelled with hyphens."""


def source_of(module: str) -> str:
    """The file of a module, from its top package's folder on ("cnikit/check/cost/x.py"), or
    the module's name when it has no file."""
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if not file:
        return module
    path = Path(file)
    depth = module.count(".") + (path.name == "__init__.py")
    return path.relative_to(path.parents[depth]).as_posix() if depth < len(path.parents) \
        else path.as_posix()


def _origin(by: Any) -> tuple[str, str]:
    """(file, qualified name) of a definition: a class or function, or a module's name."""
    if isinstance(by, str):
        return source_of(by), by
    return source_of(by.__module__), f"{by.__module__}.{by.__qualname__}"


class Registry(Mapping[str, T], Generic[T]):
    """Items of one kind by name, in the order they were registered. `noun` is how errors
    name an item ("checker", "EC2 fault kind"); `unknown` the error `lookup` raises."""

    def __init__(self, noun: str, unknown: type[Exception] = SpecError):
        self.noun = noun
        self.unknown = unknown
        self._items: dict[str, T] = {}
        self._origins: dict[str, tuple[str, str]] = {}

    def add(self, name: str, item: T, by: Any) -> T:
        """Register `item` under `name`; `by` is its definition (a class, a function, or the
        name of the module that declares it). DuplicateName when another definition has it."""
        origin = _origin(by)
        if "_" in name:
            raise BadSpelling(f"{self.noun} {name!r} in {origin[0]}: names are spelled with "
                              f"hyphens, {name.replace('_', '-')!r}")
        old = self._origins.get(name)
        if old is not None and old != origin:
            first, second = old[0], origin[0]
            if first == second:  # two definitions in one file: say which
                first, second = f"{first} ({old[1]})", f"{second} ({origin[1]})"
            raise DuplicateName(f"{self.noun} {name!r} is defined twice: in {first} and "
                                f"in {second}; give one of them another name")
        self._items[name] = item
        self._origins[name] = origin
        return item

    def remove(self, name: str, default: Any = None) -> T | None:
        """Forget an item (a test's throwaway one); it, or `default`."""
        self._origins.pop(name, None)
        return self._items.pop(name, default)

    pop = remove

    def copy(self) -> Registry[T]:
        """Another registry with the same items (a test's, dropped after it)."""
        out: Registry[T] = Registry(self.noun, self.unknown)
        out._items, out._origins = dict(self._items), dict(self._origins)
        return out

    def where(self, name: str) -> str:
        """The file that defines `name`."""
        return self._origins[name][0]

    def canonical(self, name: Any) -> Any:
        """`name` as registered: the old underscore spelling of a registered name
        (`describe_lag` for `describe-lag`) is mapped to it; anything else is `name`."""
        if isinstance(name, str) and name not in self._items:
            hyphens = name.replace("_", "-")
            if hyphens in self._items:
                return hyphens
        return name

    def renamed(self, name: Any) -> str | None:
        """The one-line deprecation note for an old spelling of a registered name, else None."""
        new = self.canonical(name)
        if new == name:
            return None
        return f"{self.noun} {name!r} is spelled {new!r} now; the old spelling is deprecated"

    def respelled(self, name: Any) -> Any:
        """`canonical(name)`, warning (DeprecationWarning, at the caller's caller) when it was
        an old spelling: for names a Python caller passes (a fixture's, a scenario's)."""
        note = self.renamed(name)
        if note is not None:
            warnings.warn(note, DeprecationWarning, stacklevel=3)
        return self.canonical(name)

    def lookup(self, name: Any) -> T:
        """The item named `name` (or its old spelling: `canonical`), or the `unknown` error
        (one line, with the known names)."""
        item = self._items.get(self.canonical(name)) if isinstance(name, str) else None
        if item is None:
            raise self.unknown(f"unknown {self.noun} {name!r} (known: {', '.join(sorted(self))})")
        return item

    def drawable(self) -> list[T]:
        """The items random chaos may draw (those with a `chaos`, faultcore.fault.Chaos), in
        the order it draws from: by rank, then name. Deterministic whatever order the files
        were imported in, so a seed draws the same schedule everywhere."""
        return [item for name, item in sorted(
            ((n, i) for n, i in self._items.items() if getattr(i, "chaos", None) is not None),
            key=lambda ni: (ni[1].chaos.rank, ni[0]))]

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"<registry of {len(self)} {self.noun}s>"
