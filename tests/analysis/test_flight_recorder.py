"""Which rank its peers waited for, from PyTorch's Flight Recorder dumps (analysis/flight_recorder.py):
the module's worked example on the recorded stall (sample_traces/fr-gloo-stall), the dumps alone,
and the recorded desync (sample_traces/fr-gloo-mismatch)."""
from __future__ import annotations

import shutil
from pathlib import Path

from aftertrace.analysis import flight_recorder as fr
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _analysed(tmp_path, bundle: Path):
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    iid = svc.submit_path(bundle).incident_id
    return svc, iid, svc.analyze(iid)


def test_the_worked_example(tmp_path):
    svc, iid, rep = _analysed(tmp_path, ROOT / "sample_traces" / "fr-gloo-stall")
    groups = fr.standings(svc.store, iid)
    assert {r: s.last for r, s in groups["0"].items()} == {0: 14, 1: 13}
    assert groups["0"][0].pending[:2] == ("gloo:all_reduce", 14) and groups["0"][1].pending is None
    ((rank, (me, ahead)),) = fr.behind(groups).items()
    assert (rank, me.last, ahead.rank, ahead.last) == (1, 13, 0, 14)
    first = rep["chains"][0]["links"][0]
    assert (first["kind"], first["rank"]) == ("rank_stalled", 1)
    assert first["summary"].endswith(
        "the Flight Recorder dumps say rank 0 enqueued collective 14 (gloo:all_reduce) of process group 0 at "
        "19:46:52.661 and it did not complete; rank 1's last was 13: rank 1 never entered collective 14")
    assert [e["source"] for e in first["evidence"]][-2:] == ["vm/fr/fr_trace_rank_0.json", "vm/fr/fr_trace_rank_1.json"]


def test_the_dumps_alone_say_which_rank_is_behind(tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(ROOT / "sample_traces" / "fr-gloo-stall" / "vm" / "fr", b / "vm" / "fr")
    _, _, rep = _analysed(tmp_path, b)
    (stall,) = [a for a in rep["anomalies"] if a["kind"] == "rank_stalled"]
    assert stall["rank"] == 1
    assert stall["summary"].startswith("rank 1 stopped making progress: last collective gloo:all_reduce #13 at "
                                       "19:46:52.557; "
                                       "the Flight Recorder dumps say rank 0 enqueued collective 14")


def test_ranks_that_called_different_collectives(tmp_path):
    svc, iid, rep = _analysed(tmp_path, ROOT / "sample_traces" / "fr-gloo-mismatch")
    chain = rep["chains"][0]
    assert [l["kind"] for l in chain["links"]][:1] == ["collective_mismatch"]
    first = chain["links"][0]
    assert first["summary"] == ("ranks called different collectives as collective 14 of process group 0: rank 0 "
                                "gloo:all_reduce, rank 1 gloo:all_gather (Flight Recorder dumps)")
    assert first["rank"] is None           # two ranks, one call each: no majority names the odd one
    assert rep["summary"].startswith("It started with the ranks calling different collectives as collective 14 "
                                     "(rank 0 gloo:all_reduce, rank 1 gloo:all_gather)")
    assert fr.behind(fr.standings(svc.store, iid)) == {}          # both entered collective 14
