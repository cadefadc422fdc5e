"""One module per input format.

Every module in this package that defines a ``PARSERS`` tuple contributes
those parser classes to the registry: adding a format is adding a module.
Formats that share an engine form a subpackage whose ``__init__`` gathers their
``PARSERS`` (``logs``: training, launcher and NCCL logs; ``kernel``: kernel logs).
"""
from __future__ import annotations

import importlib
import pkgutil


def _discover() -> tuple:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(getattr(mod, "PARSERS", ()))
    return tuple(found)


def __getattr__(name: str):
    # (found on first use: a module that only reads a table of one format, kineto_fields, does not
    # load every parser with it)
    if name == "PARSERS":
        global PARSERS
        PARSERS = _discover()
        return PARSERS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
