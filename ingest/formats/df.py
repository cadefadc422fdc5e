"""``df`` output -> how full each file system was (``/dev/shm`` above all).

What ``df`` prints, in any of its block sizes::

    Filesystem     1B-blocks     Used Available Use% Mounted on
    tmpfs           67108864 67108864         0 100% /dev/shm

The header names the unit of the three size columns: ``1K-blocks`` (the default), ``1B-blocks``
(``-B1``), ``1M-blocks`` ..., or ``Size Used Avail`` with suffixed numbers (``-h``: powers of
1024, ``64M``; ``-H``: powers of 1000). ``-T`` adds a ``Type`` column; a long file-system name
may put the numbers on the next line (older ``df``). A DataLoader passes its batches through
``/dev/shm``; a full one fails or stalls its workers.

Rows: one ``events`` row per mount (category ``filesystem``, name ``df``), attrs ``mount``,
``filesystem``, ``size_bytes``, ``used_bytes``, ``avail_bytes``, ``use_pct``. Clock: none (``df``
prints no time; the collector's manifest says when it ran).

Real samples: tests/data/stacks/ (PROVENANCE.md).
"""
from __future__ import annotations

import re

from ..model import CLOCK_NONE
from ..reader import Head
from ..registry import ParseContext, Parser

HEADER = re.compile(r"^Filesystem\s+(?:(Type)\s+)?(?:(\d+)([KMGT]?)B?-blocks|(Size))\s+Used\s+Avail(?:able)?\s+"
                    r"(?:Use|Capacity)%\s+Mounted on\s*$")
HUMAN = re.compile(r"^(\d+(?:[.,]\d+)?)([KMGTPE]?)$")
UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


def _size(text: str, block: int | None) -> int | None:
    if block is not None:
        return int(text) * block if text.isdigit() else None
    m = HUMAN.match(text)
    if not m:
        return None
    return int(float(m.group(1).replace(",", ".")) * UNIT[m.group(2)])


class DfParser(Parser):
    name = "df"
    kind = "host_info"
    priority = 40
    clock_domain = CLOCK_NONE
    description = "df output (any block size, -h, -T)"

    @classmethod
    def detect(cls, head: Head) -> bool:
        lines = [ln for ln in head.lines if ln.strip()]
        return bool(lines) and bool(HEADER.match(lines[0])) and len(lines) >= 2

    def parse(self, ctx: ParseContext) -> None:
        block = typed = None
        pending: tuple[int, str] | None = None     # a file system's name alone on its line
        for lineno, line in ctx.lines():
            if not line.strip():
                continue
            h = HEADER.match(line)
            if h:
                typed = bool(h.group(1))
                block = None if h.group(4) else int(h.group(2)) * UNIT[h.group(3)]
                continue
            f = line.split()
            if pending is not None and len(f) == (5 if typed else 4) + 1:
                f = [pending[1]] + f
                lineno = pending[0]
            pending = None
            want = 7 if typed else 6
            if len(f) == 1:
                pending = (lineno, f[0])
                continue
            if len(f) < want or block is None and not HUMAN.match(f[want - 5]):
                ctx.sink.issue("bad_line", "not a df row (file system, sizes, use%, mount point)", lineno, line)
                continue
            fs = f[0]
            at = 2 if typed else 1
            size, used, avail = (_size(x, block) for x in f[at:at + 3])
            pct = f[at + 3].rstrip("%")
            mount = " ".join(f[at + 4:])
            if size is None or used is None or avail is None or not pct.isdigit():
                ctx.sink.issue("bad_line", "a df row whose sizes are not numbers", lineno, line)
                continue
            ctx.sink.event(ts_raw_ns=None, category="filesystem", name="df", line=lineno, text=line,
                           attrs={"mount": mount, "filesystem": fs, "size_bytes": size, "used_bytes": used,
                                  "avail_bytes": avail, "use_pct": int(pct)})


PARSERS = (DfParser,)
