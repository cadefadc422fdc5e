"""Flame graphs by query over the store, on real perf files, against an independent count."""
import gzip
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from aftertrace.analysis import flamegraph as F
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data" / "perf_script"


def independent_folded(path: Path) -> Counter:
    """comm;root..leaf -> count, straight from the text (FlameGraph's convention, offsets dropped)."""
    b = path.read_bytes()
    text = (gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b).decode()
    out, comm, frames = Counter(), None, []
    for line in text.split("\n") + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if comm is not None:
                out[";".join([comm] + frames[::-1])] += 1
            comm, frames = None, []
            continue
        if line.startswith("\t"):
            m = re.match(r"^\t\s*[0-9a-f]+ (.*?)(?:\+0x[0-9a-f]+)?(?: \(([^()]*)\))?$", line)
            name, dso = m.group(1), m.group(2)
            if name == "[unknown]" and dso and dso != "[unknown]":
                name = f"[{dso.rsplit('/', 1)[-1]}]"
            frames.append(name.replace(";", ":"))
        else:
            comm = re.match(r"^\s*(.*?)\s+\d+(/\d+)?\s", line).group(1)
    return out


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    root = tmp_path_factory.mktemp("fg")
    b = root / "bundle" / "node-1"
    b.mkdir(parents=True)
    shutil.copy(DATA / "flamegraph__example-perf-stacks.txt.gz", b / "perf.txt.gz")
    svc = Service(Settings.from_env(home=root / "home"))
    iid = svc.submit_path(root / "bundle").incident_id
    svc.analyze(iid)
    return svc, iid


def test_whole_file_matches_independent_collapse(incident):
    svc, iid = incident
    tree = F.build(svc.store, iid)
    got = Counter()
    for line in F.folded(tree):
        stack, n = line.rsplit(" ", 1)
        got[stack] += int(n)
    want = independent_folded(DATA / "flamegraph__example-perf-stacks.txt.gz")
    assert tree.value == sum(want.values()) == 1315
    assert got.most_common(5) == want.most_common(5)
    assert got == want


def test_window_and_pid_filters(incident):
    svc, iid = incident
    # the file has no clock anchor: its samples are unplaced, so a time window excludes them all
    assert F.build(svc.store, iid, F.Filter(start_ns=0, end_ns=2**62)).value == 0
    whole = F.build(svc.store, iid)
    by_comm = {n: c.value for n, c in whole.children.items()}
    assert sum(by_comm.values()) == 1315
    rows = svc.store.query("SELECT pid, count(*) AS n FROM samples WHERE incident_id = ? GROUP BY pid "
                           "ORDER BY n DESC LIMIT 1", [iid])
    top, n = rows[0]["pid"], rows[0]["n"]
    assert 0 < n < 1315
    assert F.build(svc.store, iid, F.Filter(pid=top)).value == n


def test_differential_keeps_both_windows(incident):
    svc, iid = incident
    a = F.Filter(comm="perf")
    b = F.Filter()
    d = F.build(svc.store, iid, b, baseline=a)
    assert d.base == F.build(svc.store, iid, a).value
    assert d.value == 1315
    lines = F.folded(d, diff=True)
    assert all(len(l.rsplit(" ", 2)) == 3 for l in lines)
    assert sum(int(l.rsplit(" ", 2)[1]) for l in lines) == d.base


def test_parse_time():
    assert F.parse_time("2026-11-29T13:28:55.76Z") == 1795958935760000000
    assert F.parse_time("1795958935.5") == 1795958935500000000
    assert F.parse_time(None) is None


def test_standalone_html_escapes_frames():
    from aftertrace.web.flamegraph import standalone_html
    html = standalone_html({"name": "all", "value": 1, "children": [{"name": "</script><b>x", "value": 1}]},
                           "t", "s")
    assert "</script><b>" not in html and "\\u003c/script\\u003e" in html
