"""Analyse a stored incident again, without parsing it again: the time of ``rootcause.analyze``.

    AFTERTRACE_HOME=HOME .venv/bin/python bench/reanalyze.py [INCIDENT_ID] [--runs 3]

The incident (default: the last one stored in HOME) must have been analysed once (``aftertrace
analyze``) so that its tables are there; each run times the analysis of its findings, chains and
report data in this process (the first run also imports the analysis modules).
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("incident", nargs="?")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    from aftertrace.analysis import rootcause
    from aftertrace.server.service import Service
    from aftertrace.server.settings import Settings
    store = Service(Settings.from_env()).store
    iid = a.incident or store.query("SELECT incident_id FROM incidents ORDER BY created_at DESC LIMIT 1")[0]["incident_id"]
    for _ in range(a.runs):
        t = time.perf_counter()
        rootcause.analyze(store, iid)
        print(f"{iid}: rootcause.analyze {time.perf_counter() - t:.2f} s", flush=True)


if __name__ == "__main__":
    main()
