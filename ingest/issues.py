"""What a parser may say about input it could not use: the catalogue of parse issue kinds.

A parser reports a line or region it could not use with :meth:`ingest.sink.RowSink.issue` (one)
or :meth:`~ingest.sink.RowSink.issues` (many of one kind, within the source's budget: the first
ones are stored with their line, the rest counted); parsing goes on. The kind must be one of
these, each with what it means for the data and how grave it is:

* ``lost`` — input that holds data was skipped (its rows are missing);
* ``altered`` — the data was kept, changed or with less than it said (bytes replaced, a field
  left out, times without their origin);
* ``skipped`` — input aftertrace does not read on purpose (a limit, a phase or file it has no
  reader for), counted so that the user knows.

The incident's issues (``GET /api/incidents/{id}/issues``, the incident page) carry both.
"""
from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("lost", "altered", "skipped")


@dataclass(frozen=True)
class IssueKind:
    name: str
    severity: str
    about: str


ISSUE_KINDS: dict[str, IssueKind] = {k.name: k for k in (
    IssueKind("bad_line", "lost", "a line that does not follow the format; skipped"),
    IssueKind("bad_event", "lost", "a trace event that cannot be read (not an object, no numeric time); skipped"),
    IssueKind("bad_json", "lost", "JSON that does not parse; what follows it is not read"),
    IssueKind("bad_header", "lost", "the part before the records (a header, the keys before the events) "
                                    "cannot be read"),
    IssueKind("garbage", "lost", "binary data in a text file; the line is skipped"),
    IssueKind("truncated", "lost", "the file ends in the middle of a record (it was cut); what came before is kept"),
    IssueKind("bad_trailer", "altered", "the keys after the events cannot be read; the events are kept"),
    IssueKind("trailing_data", "skipped", "data after the end of the file's JSON document; not read"),
    IssueKind("bad_field", "altered", "a field of the wrong type or value; left out, the rest of its record kept"),
    IssueKind("undecodable", "altered", "bytes that are not UTF-8; replaced, the line is kept"),
    IssueKind("out_of_range", "altered", "a number too large for its column; left out"),
    IssueKind("no_time_base", "altered", "times relative to an origin the file does not give"),
    IssueKind("relative_time", "altered", "times relative to the recording's start, placed by another clock"),
    IssueKind("limit", "skipped", "a limit on rows or items was reached; the rest is counted, not kept"),
    IssueKind("not_read", "skipped", "a file of a known folder that aftertrace has no reader for"),
    IssueKind("unsupported_phase", "skipped", "trace events of a phase aftertrace does not read"),
)}


def issue_kind(name: str) -> IssueKind:
    """The catalogued kind ``name``; a kind outside the catalogue is a parser's bug."""
    try:
        return ISSUE_KINDS[name]
    except KeyError:
        raise ValueError(f"parse issue kind {name!r} is not in ingest/issues.py") from None
