"""Explicit settings: everything the service and the app are built from.

Nothing reads the environment after :func:`Settings.from_env` has built the
object; tests build their own ``Settings`` pointing at a temporary folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ingest.bundle import IntakeLimits


def default_home() -> Path:
    env = os.environ.get("AFTERTRACE_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "aftertrace"


@dataclass(frozen=True)
class Settings:
    home: Path
    db_path: Path
    limits: IntakeLimits = field(default_factory=IntakeLimits)
    workers: int = 0                 # parse processes; 0 = number of CPUs (at most 8)
    inline_bytes: int = 24 * 1024**2  # bundles smaller than this are parsed in-process
    host: str = "127.0.0.1"
    port: int = 8000
    analysis_threads: int = 1        # background analyses at once (server)
    api_token: str | None = None     # when set, API writes need "Authorization: Bearer <token>"
    executor: str = "local"          # where files are parsed: "local" (process pool) or "ray"
    ray_address: str | None = None   # with executor="ray": the cluster; None = start a local Ray

    def __post_init__(self):
        if self.executor not in ("local", "ray"):
            raise ValueError(f"unknown executor {self.executor!r}: 'local' or 'ray'")

    @classmethod
    def from_env(cls, home: str | os.PathLike | None = None, db: str | os.PathLike | None = None,
                 **kw) -> "Settings":
        h = Path(home).expanduser() if home else default_home()
        d = Path(db).expanduser() if db else h / "aftertrace.duckdb"
        kw.setdefault("api_token", os.environ.get("AFTERTRACE_TOKEN") or None)
        if kw.get("executor") is None:
            kw["executor"] = os.environ.get("AFTERTRACE_EXECUTOR") or "local"
        if kw.get("ray_address") is None:
            kw["ray_address"] = os.environ.get("AFTERTRACE_RAY_ADDRESS") or None
        return cls(home=h, db_path=d, **kw)

    def with_(self, **kw) -> "Settings":
        return replace(self, **kw)

    @property
    def bundles_dir(self) -> Path:
        return self.home / "bundles"

    @property
    def incidents_dir(self) -> Path:
        return self.home / "incidents"

    def incident_dir(self, incident_id: str) -> Path:
        return self.incidents_dir / incident_id

    @property
    def parse_workers(self) -> int:
        if self.workers > 0:
            return self.workers
        return max(1, min(os.cpu_count() or 1, 8))
