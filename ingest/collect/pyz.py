"""The recorder as one file that runs where only Python is: ``aftertrace pack-recorder``.

Training nodes rarely have the analyser's stack (DuckDB, Polars, pyarrow, FastAPI) and should not
need it to record: the recorder uses the standard library alone. This writes it as a zip
application (PEP 441) — the ``aftertrace`` and ``aftertrace.ingest`` packages' ``__init__`` and this
``collect`` package, as the install names them, and a ``__main__`` that runs it — to copy to a node
and run with any Python 3.9+::

    aftertrace pack-recorder aftertrace-collect.pyz
    scp aftertrace-collect.pyz node-7:
    ssh node-7 python3 aftertrace-collect.pyz --out /var/tmp/at -- torchrun ... train.py

The same sources give the same bytes (fixed member times, sorted names).
"""
from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_MAIN = b'''"""aftertrace's recorder (aftertrace collect), packed by aftertrace pack-recorder."""
import sys

from aftertrace.ingest.collect import main

sys.exit(main())
'''
_TOP = b'"""aftertrace\'s recorder, packed alone (its analyser is not in this file)."""\n'
_WHEN = (1980, 1, 1, 0, 0, 0)


def members() -> list[tuple[str, Path | bytes]]:
    """(name in the archive, source file or bytes), in the archive's order."""
    out: list[tuple[str, Path | bytes]] = [("__main__.py", _MAIN), ("aftertrace/__init__.py", _TOP),
                                           ("aftertrace/ingest/__init__.py", _HERE.parent / "__init__.py")]
    out += [(f"aftertrace/ingest/collect/{p.name}", p) for p in sorted(_HERE.glob("*.py"))]
    return out


def write_pyz(out: str | os.PathLike) -> Path:
    """Write the recorder to ``out`` (executable, ``#!/usr/bin/env python3``); returns its path."""
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, src in members():
                info = zipfile.ZipInfo(name, _WHEN)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                zf.writestr(info, src if isinstance(src, bytes) else src.read_bytes())
    tmp.chmod(0o755)
    tmp.replace(out)
    return out
