"""Bundle intake, the format parsers and the event model.

Nothing here knows about HTTP or the store: parsers write typed row batches
(:mod:`ingest.sink`) that the pipeline loads.
"""
import importlib.util as _util
import os as _os
import sys as _sys

__version__ = "0.1.0"


def _absent_stays_absent(name: str) -> None:
    """Record a module that is not installed as absent (``sys.modules[name] = None``), so that
    importing it fails at once. pyarrow looks for ``dateutil``'s time zones whenever it infers
    the type of Python values (``pa.scalar(1)``, ``pc.equal(array, 1)``, ``pa.array([1, 2])``),
    and Python does not remember a failed import: without dateutil every such call searched
    the whole import path again, a few times the cost of the call itself. Where the module is
    installed nothing changes."""
    if name not in _sys.modules and _util.find_spec(name) is None:
        _sys.modules[name] = None


_absent_stays_absent("dateutil")


def _no_huge_pages_for_arrow() -> None:
    """Keep pyarrow's allocator (mimalloc) from asking for transparent huge pages on its arenas
    (``MADV_HUGEPAGE``). Under the kernel's usual ``defrag=madvise``, a fault in such a region
    compacts memory first whenever no free huge page is at hand: a chunk's line buffer then took
    ten to twenty-five times as long as with 4 kB pages, in about half the runs of a large parse.
    mimalloc reads the option when pyarrow's library loads: it is set here, before any module of
    the package imports pyarrow; a value the user set stands."""
    _os.environ.setdefault("MIMALLOC_ALLOW_THP", "0")


_no_huge_pages_for_arrow()
