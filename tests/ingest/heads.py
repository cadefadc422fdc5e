"""Lines built from a grammar's own heads, for the tests that hold a compiled reader to its regexes."""
from __future__ import annotations


def each_piece_replaced(heads: list[list[str]], odd: list[str]) -> list[str]:
    """Every head whole, then with each of its pieces replaced by each odd piece in turn."""
    return ["".join(h) for h in heads] + ["".join(h[:i] + [o] + h[i + 1:]) for h in heads for i in range(len(h))
                                          for o in odd]


def edited_heads(heads: list[list[str]], pieces: list[str]):
    """A hypothesis strategy: lists of lines, each a head with up to three of its pieces dropped,
    doubled or replaced by one of ``pieces``."""
    from hypothesis import strategies as st

    edit = st.tuples(st.integers(0, 20), st.sampled_from(["drop", "double", "put"]), st.sampled_from(pieces))

    def line(spec) -> str:
        k, edits = spec
        got = list(heads[k])
        for at, how, piece in edits:
            at %= len(got)
            if how == "drop":
                del got[at]
            elif how == "double":
                got.insert(at, got[at])
            else:
                got[at] = piece
            got = got or [""]
        return "".join(got)

    spec = st.tuples(st.sampled_from(range(len(heads))), st.lists(edit, max_size=3))
    return st.lists(spec.map(line), min_size=1, max_size=10)


def holds_on_edited_heads(heads: list[list[str]], pieces: list[str], same, examples: int = 300) -> None:
    """``same(lines)`` (which asserts) on a fixed set of :func:`edited_heads` examples (hypothesis,
    derandomized: every run tries the same lines)."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(edited_heads(heads, pieces))
    def check(lines):
        same(lines)

    check()
