"""Typed, immutable causal links: the findings of the analysis and the steps of a chain."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from aftertrace.ingest.timeparse import fmt_utc

# The kinds of finding: the catalogue's members (each declared once, with its phrase, whether it
# lasts and its rules; see :mod:`.kinds`).
from .kinds import LinkKind  # noqa: F401


# A time known only as "after this line" (no later timestamped line in the file): how late it may be.
AFTER_BOUND_NS = 600_000_000_000
# A finding merged from many copies of one report (a log that repeats a crash thousands of times)
# keeps every copy's line; its JSON shows the first ones (the best copy's first) and the count,
# so that a report grows with the findings, not with the lines behind them.
EVIDENCE_SHOWN = 20
_TIMING_KEYS = frozenset(("ts_lo_ns", "ts_hi_ns", "ts_resolution_ns", "ts_bound"))


def lead_words(lead_s: float | None) -> str | None:
    """How far a finding is from the failure, in words that are never negative."""
    if lead_s is None:
        return None
    if abs(lead_s) < 0.05:
        return "at the failure"
    return f"{abs(lead_s):.1f} s {'before' if lead_s > 0 else 'after'} the failure"


class Provenance(str, Enum):
    READ = "read"          # stated by the data (a kernel line saying it killed pid N)
    INFERRED = "inferred"  # concluded by aftertrace (a rate crossing a threshold)


@dataclass(frozen=True)
class Evidence:
    source: str            # path in the bundle
    line: int | None
    text: str

    def to_json(self) -> dict:
        return {"source": self.source, "line": self.line, "text": self.text}


@dataclass(frozen=True)
class Link:
    kind: LinkKind
    ts_ns: int | None                  # UTC epoch ns (None: could not be placed in time)
    summary: str
    source: str
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    evidence: tuple[Evidence, ...] = field(default=())
    provenance: Provenance = Provenance.READ
    confidence: float = 1.0
    uncertainty_ns: int | None = None
    # What the parser or detector knew beyond the summary, as (key, value) pairs (the event's
    # attrs: exit code, signal, exception type, root_cause flag, ...). Read with ``attr``.
    attrs: tuple[tuple[str, object], ...] = ()
    entity: str | None = None          # what it is about beyond host/rank/pid: a cgroup, a comm, a bus id

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def timing_ns(self) -> tuple[int, int] | None:
        """(earliest, latest) UTC ns this link may have happened: clock uncertainty, a time
        interpolated between two timestamped lines (``ts_lo_ns``/``ts_hi_ns``), a coarse
        resolution (``ts_resolution_ns``: a launcher's whole seconds), all widened in."""
        # (computed once per link: a link never changes, and the chain search asks for the
        # windows of both ends of every candidate edge)
        try:
            return self.__dict__["_window"]
        except KeyError:
            w = self._window_ns()
            object.__setattr__(self, "_window", w)
            return w

    def _window_ns(self) -> tuple[int, int] | None:
        if self.ts_ns is None:
            return None
        u = self.uncertainty_ns or 0
        lo, hi = self.ts_ns - u, self.ts_ns + u
        # (the four keys in one pass over the attrs, each its first value as ``attr`` reads it)
        got: dict = {}
        for k, v in self.attrs:
            if k in _TIMING_KEYS and k not in got:
                got[k] = v
        tlo, thi = got.get("ts_lo_ns"), got.get("ts_hi_ns")
        if isinstance(tlo, int) and isinstance(thi, int):
            lo, hi = min(lo, tlo - u), max(hi, thi + u)
        res = got.get("ts_resolution_ns")
        if isinstance(res, int):
            hi = max(hi, self.ts_ns + res + u)
        if got.get("ts_bound") == "after":
            hi = max(hi, self.ts_ns + AFTER_BOUND_NS)
        return lo, hi

    def to_json(self, failure_ts_ns: int | None = None) -> dict:
        lead = None
        if failure_ts_ns is not None and self.ts_ns is not None:
            lead = round((failure_ts_ns - self.ts_ns) / 1e9, 6)
        return {
            "ts": None if self.ts_ns is None else self.ts_ns / 1e9,
            "time": fmt_utc(self.ts_ns),
            "host": self.host,
            "rank": self.rank,
            "pid": self.pid,
            "kind": self.kind.value,
            "source": self.source,
            "summary": self.summary,
            "lead_s": lead,
            "lead_text": lead_words(lead),
            "evidence": [e.to_json() for e in self.evidence[:EVIDENCE_SHOWN]],
            "evidence_total": len(self.evidence),
            "provenance": self.provenance.value,
            "confidence": self.confidence,
            "uncertainty_s": None if self.uncertainty_ns is None else self.uncertainty_ns / 1e9,
            "entity": self.entity,
            "time_window": None if (w := self.timing_ns()) is None else [w[0] / 1e9, w[1] / 1e9],
        }
