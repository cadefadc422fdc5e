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
"""
from __future__ import annotations

from aftertrace.analysis.links import Link

from . import (cpu_throttle, foreign_memory, freezer, memory_growth, oom_events, pressure, snapshot_counters,
               step_slowdown, straggler)
from ._series import shared_reads, time_zone


def run(store, incident_id: str, existing: list[Link]) -> list[Link]:
    """``existing`` findings plus what the metric detectors find (OOM counters merged in)."""
    zone = time_zone(store, incident_id)
    found: list[Link] = []
    with shared_reads():
        for mod in (cpu_throttle, pressure, memory_growth, foreign_memory, freezer, step_slowdown, straggler,
                    snapshot_counters):
            found += mod.detect(store, incident_id, zone)
    new, updated = oom_events.detect(store, incident_id, zone, existing)
    return updated + found + new
