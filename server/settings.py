"""Explicit settings: everything the service and the app are built from.

Nothing reads the environment after :func:`Settings.from_env` has built the
object; tests build their own ``Settings`` pointing at a temporary folder.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from aftertrace.ingest.bundle import IntakeLimits


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
    # how long a stopping server waits for its analyses to hand their work back (each stops at its
    # next step, its parse workers ended at once); one still running then is queued again at start
    stop_grace_s: float = 15.0
    api_token: str | None = None     # when set, API writes need "Authorization: Bearer <token>"
    executor: str = "local"          # where files are parsed: "local" (process pool) or "ray"
    ray_address: str | None = None   # with executor="ray": the cluster; None = start a local Ray
    # Shared location of Parquet partitions (local path or NFS): when set, incidents analysed with
    # these settings keep their heavy tables there and the store attaches them (server/store.py)
    parts_dir: Path | None = None
    # perf script text (uncompressed) larger than this is parsed in byte ranges of about this size,
    # one task each ($AFTERTRACE_SPLIT_BYTES; 0: never)
    split_bytes: int = 64 * 1024**2
    # the names the server answers to (the request's Host; $AFTERTRACE_ALLOWED_HOSTS, comma-separated;
    # "*": any). None: this machine's own names when it listens on a loopback address (a page
    # elsewhere cannot reach it through a name of its own: DNS rebinding), any name otherwise
    allowed_hosts: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.executor not in ("local", "ray"):
            raise ValueError(f"unknown executor {self.executor!r}: 'local' or 'ray'")
        if self.parts_dir is not None:
            p = Path(self.parts_dir).expanduser()
            if "://" in str(self.parts_dir):
                raise ValueError(f"parts dir {self.parts_dir}: object storage is not supported yet; "
                                 "give a local path or an NFS mount")
            if any(c in str(p) for c in "*?[]{}'"):
                raise ValueError(f"parts dir {self.parts_dir}: no glob characters or quotes in the path, please")
            object.__setattr__(self, "parts_dir", p.resolve())

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
        if kw.get("parts_dir") is None:
            kw["parts_dir"] = os.environ.get("AFTERTRACE_PARTS") or None
        if kw.get("allowed_hosts") is None and os.environ.get("AFTERTRACE_ALLOWED_HOSTS"):
            kw["allowed_hosts"] = tuple(h.strip().lower() for h in os.environ["AFTERTRACE_ALLOWED_HOSTS"].split(",")
                                        if h.strip())
        if kw.get("split_bytes") is None:
            kw.pop("split_bytes", None)
            if os.environ.get("AFTERTRACE_SPLIT_BYTES"):
                kw["split_bytes"] = int(os.environ["AFTERTRACE_SPLIT_BYTES"])
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

    def answers_to(self, name: str) -> bool:
        """Whether a request for host ``name`` (the Host header without its port) is for this server."""
        name = name.lower().strip("[]").rstrip(".")
        allowed = self.allowed_hosts
        if allowed is None:
            if not _loopback(self.host):
                return True
            allowed = ("localhost", "127.0.0.1", "::1", self.host.lower())
        return "*" in allowed or name in {a.strip("[]").rstrip(".") for a in allowed} or (
            "localhost" in allowed and name.endswith(".localhost"))

    @property
    def parse_workers(self) -> int:
        if self.workers > 0:
            return self.workers
        return max(1, min(os.cpu_count() or 1, 8))


def _loopback(host: str) -> bool:
    """Whether a listening address is this machine's loopback alone."""
    import ipaddress
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
