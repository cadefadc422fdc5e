"""The walk every trace format shares (:class:`aftertrace.analysis.export.Walk`): a format's writer
only says how it writes what the walk lays out. The writer here is the smallest one can be -- a
line per begin, end and instant -- as a newcomer's format would start, over a hand-made incident:
spans that nest, one that overlaps without nesting, instants, a row with no time, two hosts."""
from __future__ import annotations

import pytest

from aftertrace.analysis.export import End, Walk
from aftertrace.server.store import Store

T0 = 1_795_958_900_000_000_000


def where(track) -> str:
    """The track's names from its process down (an overlap lane is a child of its track)."""
    names = []
    while track is not None and track.kind != "host":
        names.append(track.name)
        track = track.parent
    return " / ".join(reversed(names))


class Lines(Walk):
    """``B``/``E``/``I`` lines (ns after T0, the track or lane, the name)."""

    def __init__(self, store, incident_id):
        self.out: list[str] = []
        self.stats = {"exported": 0, "spans": 0, "instants": 0}
        super().__init__(store, incident_id, None, lambda track: None)

    def run(self) -> list[str]:
        for m in self.spans("events", self.stats, ends=True):
            if isinstance(m, End):
                self.out.append(f"E {m.ts - T0} {where(m.lane)}")
            elif m.lane is None:
                self.out.append(f"I {m.ts - T0} {where(m.track)} {m.name} {dict(m.values)}")
            else:
                self.out.append(f"B {m.ts - T0} {where(m.lane)} {m.name} {m.source}")
        return self.out


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("walk") / "walk.duckdb")
    iid = "walk00000001"
    store.insert_rows("incidents", [{"incident_id": iid, "bundle_sha256": "0" * 64, "status": "done",
                                     "report": None}])
    store.insert_rows("sources", [
        dict(incident_id=iid, source_id=1, path="a/app.log", kind="app_log", host="a", rank=0, pid=100,
             status="parsed"),
        dict(incident_id=iid, source_id=2, path="b/app.log", kind="app_log", host="b", rank=1, pid=200,
             status="parsed")])
    rows = [(1, 1000, 1000, "A"), (1, 1500, 2000, "B"),     # B overlaps A without nesting: a lane of its own
            (1, 1600, 100, "C"),                            # C nests in A
            (1, 4000, None, "mark"), (1, None, None, "unplaced"), (2, 900, 50, "on b")]
    store.insert_rows("events", [dict(incident_id=iid, source_id=s, tid=101, line=n + 1,
                                      ts_utc_ns=None if ts is None else T0 + ts, dur_ns=dur, name=name)
                                 for n, (s, ts, dur, name) in enumerate(rows)])
    return store, iid


def test_each_span_ends_in_time_order_before_the_rows_after_it(incident):
    w = Lines(*incident)
    a, b = "a: rank 0 (pid 100) / thread 101", "b: rank 1 (pid 200) / thread 101"
    assert w.run() == [
        f"B 900 {b} on b b/app.log",
        f"E 950 {b}",                              # before A, which starts after it
        f"B 1000 {a} A a/app.log",
        f"B 1500 {a} / thread 101 (overlap 1) B a/app.log",     # overlaps A without nesting: a lane of its own
        f"B 1600 {a} C a/app.log",                 # nests in A: A's lane
        f"E 1700 {a}",
        f"E 2000 {a}",
        f"E 3500 {a} / thread 101 (overlap 1)",
        f"I 4000 {a} mark {{'line': 4}}",
    ]
    assert w.stats == {"exported": 5, "spans": 4, "instants": 1}            # the row with no time is not walked
    assert w.walked()["time_range_ns"] == [T0 + 900, T0 + 4000]
