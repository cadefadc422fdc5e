"""The ingest package itself: what importing it sets up for the process."""
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ingest


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
