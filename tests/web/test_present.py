"""Evidence is shown where it is: a line where it has one, its source alone where it has none."""
from aftertrace.web.pages import _env
from aftertrace.web.present import where


def test_evidence_with_and_without_a_line():
    assert where({"source": "vm/dmesg.txt", "line": 8}) == "vm/dmesg.txt:8"
    assert where({"source": "vm/cgroup/", "line": None}) == "vm/cgroup/"
    # the templates use the same filter, and escape what a bundle named
    t = _env.from_string("{% for e in ev %}<div>{{ e|where }}</div>{% endfor %}")
    assert t.render(ev=[{"source": "vm/cgroup/", "line": None}, {"source": "<x>.log", "line": 3}]) == \
        "<div>vm/cgroup/</div><div>&lt;x&gt;.log:3</div>"


def test_when_a_finding_has_no_time_it_says_so():
    from aftertrace.web.present import when
    assert when({"time": "2026-12-02T10:00:00.000000Z"}) == "2026-12-02T10:00:00.000000Z"
    assert when({"time": None}) == "time unknown"


def test_times_as_people_read_them():
    from aftertrace.web.present import clock_of, rel_text
    fail = {"time": "2026-11-29T13:28:56.147000Z"}
    assert clock_of({"time": "2026-11-29T13:28:24.409226Z"}, fail) == "13:28:24.409"
    assert clock_of({"time": "2022-10-03T13:52:42.750000Z"}, fail) == "2022-10-03 13:52:42.750"
    assert clock_of({"time": None}, fail) == "time unknown"
    assert [rel_text(x) for x in (31.737774, 0.0735, 0.01, -0.5, 600, 131154511.6, None)] == \
        ["T−31.7 s", "T−0.1 s", "T", "T+0.5 s", "T−10.0 min", "T−1518 d", ""]


def test_the_chain_strip_of_the_readme_sample():
    """The sample's chain (sample_traces/oom-after-throttle): throttling 31.7 s before the failure,
    memory growth at 16.2 s, then the kill, SIGKILL and the failure within 0.4 s of each other: one
    axis from T−31.7 s to T, the last three marks stacked in rows so their labels do not overlap."""
    from aftertrace.web.present import chain_strip
    lead = {"cpu_throttle": 31.737774, "memory_growth": 16.237944, "oom_kill": 0.386408, "signal_kill": 0.0735,
            "job_failure": 0.0}
    chain = {"links": [{"kind": k, "lead_s": v, "ts": 1_795_958_936.147 - v, "rank": 0 if k != "cpu_throttle" else None,
                        "host": "vm", "time": None} for k, v in lead.items()]}
    s = chain_strip(chain)
    assert [(m["kind"], m["rel"], m["row"], m["role"]) for m in s["marks"]] == [
        ("cpu_throttle", "T−31.7 s", 0, "origin"), ("memory_growth", "T−16.2 s", 0, "link"),
        ("oom_kill", "T−0.4 s", 0, "link"), ("signal_kill", "T−0.1 s", 1, "link"), ("job_failure", "T", 2, "failure")]
    xs = [m["x"] for m in s["marks"]]
    assert xs == sorted(xs) and xs[0] == 24.0 and xs[-1] == 960 - 24 - 150
    assert [t["text"] for t in s["ticks"]] == ["T", "T−10 s", "T−20 s", "T−30 s"]
    assert chain_strip({"links": chain["links"][:1]}) is None          # one timed link: no axis to draw
