"""The perf samples as a speedscope file: the module's worked example, and the sample bundle's."""
import json

from aftertrace.analysis.export.speedscope import SCHEMA, profiles


def test_the_module_worked_example():
    rows = [("vm", 17988, "python3", 1, 10), ("vm", 17988, "python3", 1, 10), ("vm", 17988, "python3", 1, 11),
            ("vm", 17988, "python3", 1, 10)]
    paths = {(1, 10): ["A", "B"], (1, 11): ["A", "C"]}
    doc = profiles(rows, paths, {0: {"host": "vm", "pid": 17988}})
    assert doc["$schema"] == SCHEMA and doc["shared"]["frames"] == [{"name": "A"}, {"name": "B"}, {"name": "C"}]
    (p,) = doc["profiles"]
    assert (p["type"], p["unit"], p["name"], p["startValue"], p["endValue"]) == \
        ("sampled", "none", "vm 17988 python3 (rank 0)", 0, 4)
    assert p["samples"] == [[0, 1], [0, 2], [0, 1]] and p["weights"] == [2, 1, 1]
    json.dumps(doc)


def test_processes_are_profiles_most_samples_first_and_a_sample_without_a_stack_says_so():
    rows = [("h", 1, "a", 1, None), ("h", 2, "b", 1, 10), ("h", 2, "b", 1, 11)]
    doc = profiles(rows, {(1, 10): ["x"], (1, 11): ["y"]})
    assert [p["name"] for p in doc["profiles"]] == ["h 2 b", "h 1 a"]
    assert doc["profiles"][1]["samples"] == [[doc["shared"]["frames"].index({"name": "[no stack]"})]]
