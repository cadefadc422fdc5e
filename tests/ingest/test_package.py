"""The ingest package itself: what importing it sets up for the process."""
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aftertrace import ingest


class _Lookups:
    """A meta path finder that counts the module lookups that reach the import path."""

    def __init__(self):
        self.names = []

    def find_spec(self, name, path=None, target=None):
        self.names.append(name)
        return None


def test_a_missing_module_is_recorded_absent_and_an_installed_one_left_alone(monkeypatch):
    monkeypatch.delitem(sys.modules, "no_such_module_for_aftertrace", raising=False)
    ingest._absent_stays_absent("no_such_module_for_aftertrace")
    assert sys.modules["no_such_module_for_aftertrace"] is None
    with pytest.raises(ModuleNotFoundError):
        import no_such_module_for_aftertrace  # noqa: F401
    monkeypatch.delitem(sys.modules, "no_such_module_for_aftertrace")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)   # (installed, not imported yet)
    ingest._absent_stays_absent("colorsys")
    assert "colorsys" not in sys.modules
    import colorsys
    assert colorsys.rgb_to_hsv(1, 0, 0)[0] == 0


def test_pyarrow_conversions_of_python_values_search_no_import_path(monkeypatch):
    a = pa.array([1, 2, 3])
    pa.scalar(1), pc.equal(a, 2)          # (pyarrow looks for pandas once, and remembers)
    look = _Lookups()
    monkeypatch.setattr(sys, "meta_path", [look] + sys.meta_path)
    for _ in range(20):
        pa.scalar(1)
        pc.equal(a, 2)
        pa.array([1, 2])
    assert look.names == []


def test_arrows_allocator_asks_for_no_huge_pages():
    """A buffer pyarrow allocates after ``import ingest`` lies in a mapping without the huge-page
    advice (``hg`` in its VmFlags): such faults may stall for a memory compaction."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import os
        os.environ.pop("MIMALLOC_ALLOW_THP", None)
        import aftertrace.ingest
        import pyarrow as pa
        b = pa.allocate_buffer(64 << 20)
        inside = None
        for line in open("/proc/self/smaps"):
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= b.address < hi
            elif inside and line.startswith("VmFlags:"):
                print("hg" in line.split())
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
