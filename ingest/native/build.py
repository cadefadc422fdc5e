"""Compile the line engine (``scan.c``) into a shared library, with the standard library only.

Run by the wheel build (``hatch_build.py``) and, in a checkout or an editable install, by the
loader when the library for the present source is missing. The library's file name carries the
first 16 hex digits of the SHA-256 of the source and the flags, so a library built otherwise is
never loaded by mistake (the dynamic loader caches libraries by name: a rebuilt file under the old
name would not be read again in a running process).
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("scan.c")
PREFIX = "_scan-"
FLAGS = ("-O3", "-std=c99", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror")


class BuildError(RuntimeError):
    """The library could not be built (no compiler, or the compiler failed)."""


def source_hash(src: Path = SOURCE) -> str:
    """SHA-256 of the source and the flags it is compiled with (either makes another library)."""
    return hashlib.sha256(src.read_bytes() + "\0".join(FLAGS).encode()).hexdigest()


def library_name(src: Path = SOURCE) -> str:
    return f"{PREFIX}{source_hash(src)[:16]}.so"


def compiler() -> list[str] | None:
    cc = os.environ.get("CC")
    if cc:
        return shlex.split(cc)
    found = next((shutil.which(c) for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    return [found] if found else None


def build(out_dir: Path, src: Path = SOURCE) -> Path:
    """Build the library into ``out_dir`` (atomically: concurrent builders each write a file of
    their own and rename it into place); returns its path."""
    cc = compiler()
    if cc is None:
        raise BuildError(f"aftertrace's line engine ({src.name}) must be compiled and no C compiler was "
                         "found: install one (Debian: apt-get install gcc) or name it in CC")
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / library_name(src)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [*cc, *FLAGS, f'-DAT_SOURCE_HASH="{source_hash(src)}"', "-o", tmp, str(src)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise BuildError(f"compiling {src} failed ({shlex.join(cmd)}):\n{r.stderr.strip()}")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in out_dir.glob(PREFIX + "*.so"):     # (libraries of earlier source)
        if old != dest:
            try:
                old.unlink()
            except OSError:
                pass
    return dest
