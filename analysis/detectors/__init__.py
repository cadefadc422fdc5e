"""Metric detectors over the aligned store: each its own small module naming its evidence.

* ``cpu_throttle`` — onset of CFS throttling of a cgroup (cpu.stat rates).
* ``pressure`` — ``cpu_pressure`` / ``memory_pressure`` from PSI stall-time rates.
* ``memory_growth`` — memory heading for the cgroup limit, with the projected time to hit it.
* ``foreign_memory`` — host memory taken by processes outside the snapshotted cgroups.
* ``freezer`` — ``cgroup_frozen`` from freezer-state snapshots.
* ``step_slowdown`` — a rank's steps much slower than its own earlier ones (log step lines).
* ``straggler`` — a rank whose steps take longer than its peers' same steps.
* ``snapshot_counters`` — what one untimed copy of a cgroup/PSI file says (throttled periods,
  OOM kills counted, PSI averages).
* ``oom_events`` — OOM kills counted by the cgroup (merged into kernel-log OOM findings).

Each compares a series with the incident's own quiet level (median and MAD of the series;
see ``_series``) and cites the raw snapshot lines, re-read from the member files.

The detectors are found, not listed: every module of this package whose name does not start with
``_`` is one, with ``EMITS`` (the finding kinds it makes, :mod:`aftertrace.analysis.kinds`) and
``detect(store, incident_id, zone) -> list[Link]``; they run in the order of their names. A
detector that revises the findings made before it (``oom_events``: the kernel's OOM kills, which
the cgroup's own count confirms) has ``merge(store, incident_id, zone, existing) -> (new,
updated)`` instead, and runs after the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from aftertrace.analysis.links import Link

from ._series import shared_reads, time_zone


def _found() -> tuple[ModuleType, ...]:
    mods = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
            if not m.name.startswith("_")]
    for mod in mods:
        if not isinstance(getattr(mod, "EMITS", None), frozenset) or not (hasattr(mod, "detect") or
                                                                         hasattr(mod, "merge")):
            raise TypeError(f"{mod.__name__}: a detector has EMITS and detect() (or merge())")
    return tuple(sorted(mods, key=lambda m: m.__name__))


DETECTORS: tuple[ModuleType, ...] = _found()


def run(store, incident_id: str, existing: list[Link]) -> list[Link]:
    """``existing`` findings plus what the metric detectors find (the revising ones last)."""
    zone = time_zone(store, incident_id)
    found: list[Link] = []
    with shared_reads():
        for mod in DETECTORS:
            if hasattr(mod, "detect"):
                found += mod.detect(store, incident_id, zone)
        for mod in DETECTORS:
            if hasattr(mod, "merge"):
                new, existing = mod.merge(store, incident_id, zone, existing)
                found += new
    return existing + found
