"""The straggler detector on step metrics written the way the app-log parser writes them."""
from aftertrace.analysis.detectors import straggler
from aftertrace.server.store import Store

T0 = 1_800_000_000_000_000_000


def _store(tmp_path, times: dict[int, list[float]]) -> Store:
    st = Store(tmp_path / "s.duckdb")
    st.insert_rows("sources", [{"incident_id": "i", "source_id": 1, "path": "logs/train.log", "kind": "app_log",
                                "host": "node-1", "status": "parsed", "clock_domain": "wall"}])
    rows = []
    for rank, dts in times.items():
        t = T0
        for n, dt in enumerate(dts):
            t += int(dt * 1e9)
            line = 1 + n * len(times) + rank
            for metric, value in (("step", n), ("step_time", dt)):
                rows.append({"incident_id": "i", "source_id": 1, "host": "node-1", "entity": f"rank {rank}",
                             "metric": metric, "ts_raw_ns": t, "ts_utc_ns": t, "value": float(value),
                             "unit": "s", "line": line})
    st.insert_rows("metrics", rows)
    return st


def test_a_rank_that_falls_behind_its_peers(tmp_path):
    base = [0.5] * 20
    slow = [0.5] * 8 + [0.9] * 12          # rank 2 takes 1.8x from step 8 on
    st = _store(tmp_path, {0: base, 1: base, 2: slow})
    (l,) = straggler.detect(st, "i")
    assert l.kind.value == "straggler" and l.rank == 2 and l.attr("steps") == 12
    assert abs(l.attr("ratio") - 1.8) < 1e-9
    assert l.evidence[0].line == 1 + 8 * 3 + 2 and "step=8 step_time=0.900s" in l.evidence[0].text
    # it began when step 8 began: after steps 0..7 of 0.5 s
    assert l.ts_ns == T0 + int(8 * 0.5e9)


def test_synchronous_ranks_and_short_blips_are_not_stragglers(tmp_path):
    base = [0.5] * 20
    blip = [0.5] * 8 + [0.9] * 3 + [0.5] * 9     # 3 slow steps < MIN_STEPS
    st = _store(tmp_path, {0: base, 1: base, 2: blip})
    assert straggler.detect(st, "i") == []
    st2 = _store(tmp_path / "b" if (tmp_path / "b").mkdir() is None else tmp_path, {0: base})
    assert straggler.detect(st2, "i") == []
