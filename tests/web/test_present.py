"""Evidence is shown where it is: a line where it has one, its source alone where it has none."""
from web.pages import _env
from web.present import where


def test_evidence_with_and_without_a_line():
    assert where({"source": "vm/dmesg.txt", "line": 8}) == "vm/dmesg.txt:8"
    assert where({"source": "vm/cgroup/", "line": None}) == "vm/cgroup/"
    # the templates use the same filter, and escape what a bundle named
    t = _env.from_string("{% for e in ev %}<div>{{ e|where }}</div>{% endfor %}")
    assert t.render(ev=[{"source": "vm/cgroup/", "line": None}, {"source": "<x>.log", "line": 3}]) == \
        "<div>vm/cgroup/</div><div>&lt;x&gt;.log:3</div>"


def test_when_a_finding_has_no_time_it_says_so():
    from web.present import when
    assert when({"time": "2026-12-02T10:00:00.000000Z"}) == "2026-12-02T10:00:00.000000Z"
    assert when({"time": None}) == "time unknown"
