"""The report's JSON text: the document the standard encoder writes, spelled by orjson."""
import json
import math

from aftertrace.analysis.report import dumps


def test_the_same_document_as_the_standard_encoder():
    rep = {"schema": "aftertrace.report/1", "sources": [{"path": "nœud-0/rank 1.log", "bytes": 12, "ok": True}],
           "chains": [{"links": [{"kind": "oom_kill", "uncertainty_s": 1e-05, "rank": None}]}],
           "counts": {3: "int keys become text"}, "notes": ["<script>\u2028"]}
    for indent in (True, False):
        text = dumps(rep, indent)
        assert json.loads(text) == json.loads(json.dumps(rep))
        assert ("\n  " in text) == indent
    assert dumps(rep).startswith('{\n  "schema": "aftertrace.report/1",\n  "sources": [\n    {\n')


def test_nan_is_null_and_a_huge_integer_is_still_written():
    assert json.loads(dumps({"x": math.nan}))["x"] is None
    big = {"pid": 1 << 70}          # (orjson refuses it: the standard encoder writes it)
    assert json.loads(dumps(big)) == big and "\n  " in dumps(big)
    assert json.loads(dumps(big, indent=False)) == big
