"""The nemesis's actions on processes and on the account (base.py): one file each, every
module here imported below so that defining a class is the only step."""

import importlib
import pkgutil

from cnikit.cluster.actions.base import ACTIONS, Action, Served, act, draw

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["ACTIONS", "Action", "Served", "act", "draw"]
