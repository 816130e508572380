"""The checkers every run uses, one module each in this package.

Adding a checker is one new module here with one Checker subclass (see base.py): importing
this package imports every module in it, and defining the class registers it.
"""

from __future__ import annotations

import importlib
import pkgutil

from cnikit.check.checkers.base import (
    ANCHOR_PREFIX,
    CHECKERS,
    VIOLATION,
    WARNING,
    Checker,
    PodState,
    Violation,
    canonical_ip,
    checker_of,
    in_order,
)

__all__ = ["ANCHOR_PREFIX", "CHECKERS", "VIOLATION", "WARNING", "Checker", "PodState",
           "Violation", "canonical_ip", "checker_of", "in_order"]

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")
