"""The hostile-input corpus, built at run time from the real files in ``tests/data``.

Nothing here invents a format: every case starts from a real recorded file and breaks it
(cuts it, re-encodes it, splices it with another format, buries it in an archive that is
itself hostile). Archives and bombs are made in the test's own temporary folder; the bombs
are small on disk and huge once decompressed.
"""
from __future__ import annotations

import gzip
import io
import os
import random
import re
import stat
import tarfile
import time
import zipfile
from pathlib import Path

from aftertrace.ingest.bundle import IntakeLimits

# Small limits for the suite, so that a bomb is stopped after a few MB of work instead of GiBs.
LIMITS = IntakeLimits(max_members=2_000, max_member_bytes=4 * 1024**2, max_total_bytes=12 * 1024**2,
                      max_upload_bytes=6 * 1024**2)

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES_DIR = Path(__file__).resolve().parents[2] / "sample_traces"

# One real file per registered per-file parser (the format it is detected as, by content).
SAMPLES = {
    "kineto": "torch_trace/vm_32018.1795959631282104512.pt.trace.json.gz",
    "perf_script": "perf_script/flamegraph__perf-js-stacks-01.txt",
    "cgroup_concat": "cgroup/recorded/tail.txt.gz",
    "cgroup_jsonl": "cgroup/recorded/series.jsonl.gz",
    "journal_json": "kernel/vm_journalctl_k_json_tail.txt.gz",
    "nvidia_bug_report": "kernel/nvidia-bug-report_excerpt.log",
    "nvidia_smi_csv": "cgroup/nvidia_smi/aau_util.csv",
    "journal_monotonic": "kernel/vm_journalctl_k_short-monotonic.txt.gz",
    "dmesg_ctime": "kernel/vm_dmesg_T.txt",
    "dmesg_iso": "kernel/gpud__dmesg-decode-iso_xid13_short.log",
    "dmesg_kmsg": "kernel/gpud__dev-kmsg_raw_nvswitch.log",
    "dmesg_raw": "kernel/vm_dmesg.txt",
    "syslog": "kernel/issue_ltp-1080_syslog_memcg_oom_rhel7.log",
    "syslog_iso": "kernel/gpud__journalctl-k-short-iso_k8s_node.log",
    "nccl_log": "nccl_log/issue_nvidia-nccl-1232_socketProgress_conn_closed.log",
    "app_log": "app_log/torchrun_sigkill.log",
    "host_info": "host_info/proc_stat",
    "kernel_notime": "kernel/issue_ddnet-401_no_timestamp_hung_task.log",
    "collect_manifest": "../../sample_traces/collected-hang/aftertrace-manifest.json",
}

# Payloads that must never reach a page unescaped.
XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "javascript:alert(1)")


def real(parser: str) -> tuple[str, bytes]:
    """(file name without .gz, decompressed bytes) of the parser's real sample."""
    p = DATA / SAMPLES[parser]
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    return name, data


# ---------------------------------------------------------------------------------------------
# mutations of one file: name -> f(data, rng) -> bytes. Each keeps the real file's bytes around
# the damage, so that the parser meets its own format broken, not random noise.

def _line_starts(data: bytes) -> list[int]:
    return [0] + [m.end() for m in re.finditer(rb"\n", data) if m.end() < len(data)]


def _middle_line(data: bytes) -> int:
    starts = _line_starts(data)
    return starts[len(starts) // 2]


def cut_mid_line(data: bytes, rng: random.Random) -> bytes:
    """Truncated in the middle of a line (the writer died mid-write)."""
    at = _middle_line(data)
    end = data.find(b"\n", at)
    end = len(data) if end < 0 else end
    return data[: at + max(1, (end - at) // 2)]


def cut_in_string(data: bytes, rng: random.Random) -> bytes:
    """Truncated inside a quoted string (inside a JSON string for a trace), else mid-line."""
    q = data.find(b'"', len(data) // 2)
    if q < 0:
        return cut_mid_line(data, rng)
    end = data.find(b'"', q + 1)
    return data[: q + 1 + max(1, ((end if end > q else q + 4) - q) // 2)]


def cut_last_byte(data: bytes, rng: random.Random) -> bytes:
    return data[:-1]


def cut_head(data: bytes, rng: random.Random) -> bytes:
    """Only the first 37 bytes survived."""
    return data[:37]


def garbage_line(data: bytes, rng: random.Random) -> bytes:
    at = _middle_line(data)
    return data[:at] + rng.randbytes(512).replace(b"\n", b"\x00") + b"\n" + data[at:]


def binary_noise(data: bytes, rng: random.Random) -> bytes:
    return rng.randbytes(max(64, min(len(data), 64 * 1024)))


def invalid_utf8(data: bytes, rng: random.Random) -> bytes:
    starts = _line_starts(data)
    out = bytearray(data)
    for s in rng.sample(starts, min(5, len(starts))):
        out[s:s] = b"\xff\xfe\xc3("
    return bytes(out)


def latin1(data: bytes, rng: random.Random) -> bytes:
    """Latin-1 text in a few lines (a host name, a user's message): not UTF-8."""
    lines = data.split(b"\n")
    for i in rng.sample(range(len(lines) // 2, len(lines)), min(5, len(lines) - len(lines) // 2)):
        lines[i] += " caf\u00e9 r\u00e9sum\u00e9 \u00b5s \u00e0 d\u00e9j\u00e0".encode("latin-1")
    return b"\n".join(lines)


def utf16(data: bytes, rng: random.Random) -> bytes:
    return data.decode("utf-8", "replace").encode("utf-16")


def nul_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for i in sorted(rng.sample(range(len(out)), min(6, len(out))), reverse=True):
        out[i:i] = b"\x00"
    return bytes(out)


def long_line(data: bytes, rng: random.Random, size: int = 10 * 1024 * 1024) -> bytes:
    """A 10 MB line in the middle (a binary dump or a minified JSON written to a log)."""
    at = _middle_line(data)
    return data[:at] + data[at:data.find(b"\n", at) + 1 or len(data)].rstrip(b"\n") + b"A" * size + b"\n" + data[at:]


def huge_numbers(data: bytes, rng: random.Random) -> bytes:
    """Every number of 8 lines after the middle made 30 digits long (pids, times, counters past
    64 bits: a corrupted write)."""
    lines = data.split(b"\n")
    for i in range(len(lines) // 2, min(len(lines), len(lines) // 2 + 8)):
        lines[i] = re.sub(rb"\d+", b"9" * 30, lines[i])
    return b"\n".join(lines)


def impossible_times(data: bytes, rng: random.Random) -> bytes:
    """Clock digits corrupted into impossible values (second 99, hour 47, month 13, day 32)."""
    data = re.sub(rb"(\d\d):(\d\d):(\d\d)", lambda m: m.group(1) + b":" + m.group(2) + b":99", data, count=5)
    data = re.sub(rb"\b(20\d\d)-(\d\d)-(\d\d)", rb"\1-13-32", data, count=3)
    return data


def crlf(data: bytes, rng: random.Random) -> bytes:
    return data.replace(b"\n", b"\r\n")


def bare_cr(data: bytes, rng: random.Random) -> bytes:
    return data.replace(b"\n", b"\r")


def empty(data: bytes, rng: random.Random) -> bytes:
    return b""


MUTATIONS = {
    "truncated_mid_line": cut_mid_line,
    "truncated_in_string": cut_in_string,
    "truncated_last_byte": cut_last_byte,
    "truncated_to_37_bytes": cut_head,
    "garbage_line": garbage_line,
    "binary_noise": binary_noise,
    "invalid_utf8": invalid_utf8,
    "latin1": latin1,
    "utf16": utf16,
    "nul_bytes": nul_bytes,
    "long_line_10mb": long_line,
    "huge_numbers": huge_numbers,
    "impossible_times": impossible_times,
    "crlf": crlf,
    "bare_cr": bare_cr,
    "empty": empty,
}


def gzip_cut(data: bytes, frac: float = 0.6) -> bytes:
    """The file gzip-compressed, the stream cut inside its deflate data."""
    g = gzip.compress(data, mtime=0)
    return g[: max(12, int(len(g) * frac))]


def gzip_damaged(data: bytes, rng: random.Random) -> bytes:
    """The file gzip-compressed with bytes flipped in the middle of the deflate stream."""
    g = bytearray(gzip.compress(data, mtime=0))
    for i in range(len(g) // 2, min(len(g) - 8, len(g) // 2 + 8)):
        g[i] ^= 0x5A
    return bytes(g)


def splice(a: bytes, b: bytes) -> bytes:
    """The first half of one format's file, then the second half of another's."""
    return a[: _middle_line(a)] + b[_middle_line(b):]


# ---------------------------------------------------------------------------------------------
# archives

def tar_member(tf: tarfile.TarFile, name: str, data: bytes = b"", type_=tarfile.REGTYPE, link: str = "") -> None:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode, ti.mtime = type_, link, 0o644, 1_700_000_000
    ti.size = len(data) if type_ == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)


def tar_bytes(members, mode: str = "w") -> bytes:
    """``members``: (name, data) or (name, data, type, link)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for m in members:
            tar_member(tf, *m)
    return buf.getvalue()


def zip_bytes(members, symlinks=(), specials=()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zi = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
        for name, target in symlinks:
            zi = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            zi.create_system, zi.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
            zf.writestr(zi, target)
        for name, mode in specials:
            zi = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            zi.create_system, zi.external_attr = 3, (mode | 0o644) << 16
            zf.writestr(zi, b"")
    return buf.getvalue()


def gzip_bomb(line: bytes, size: int) -> bytes:
    """About ``size`` bytes of a real line repeated, as a multi-member gzip (one compressed MiB of
    lines, repeated: quick to build, a few hundred times smaller than what it holds)."""
    block = line * max(1, (1 << 20) // len(line))
    member = gzip.compress(block, compresslevel=9, mtime=0)
    return member * max(1, size // len(block))


def _tar_entry(name: str, data: bytes) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o644, 1_700_000_000
    return ti.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)


def tar_gz_bomb(line: bytes, size: int, before=(), after=()) -> bytes:
    """A tar.gz whose member ``node-1/bomb.log`` holds about ``size`` bytes of a real line, between
    ordinary members. The gzip is multi-member (one compressed MiB of lines, repeated), which
    tar readers take as one stream: quick to build, a few hundred times smaller than its tar."""
    block = line * max(1, (1 << 20) // len(line))
    k = max(1, size // len(block))
    head = b"".join(_tar_entry(n, d) for n, d in before)
    ti = tarfile.TarInfo("node-1/bomb.log")
    ti.size, ti.mode, ti.mtime = k * len(block), 0o644, 1_700_000_000
    head += ti.tobuf(format=tarfile.GNU_FORMAT)
    tail = b"\0" * (-(k * len(block)) % 512) + b"".join(_tar_entry(n, d) for n, d in after) + b"\0" * 1024
    return (gzip.compress(head, mtime=0) + gzip.compress(block, compresslevel=9, mtime=0) * k
            + gzip.compress(tail, mtime=0))


class _Repeat(io.RawIOBase):
    """``size`` bytes of ``line`` repeated, as a stream (the bomb is never held in memory)."""

    def __init__(self, line: bytes, size: int):
        self.block = line * max(1, (1 << 20) // len(line))
        self.left = size

    def readable(self):
        return True

    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        out = (self.block * (n // len(self.block) + 1))[:n]
        self.left -= n
        return out


def zip_bomb(line: bytes, size: int, name: str = "node-1/bomb.log", symlink: bool = False,
             others=()) -> bytes:
    """A zip with one member of ``size`` decompressed bytes (written in streaming mode); with
    ``symlink`` the member is marked as a symbolic link (its 'target' is the bomb)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, data in others:
            zf.writestr(n, data)
        zi = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
        zi.compress_type = zipfile.ZIP_DEFLATED
        if symlink:
            zi.create_system, zi.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
        with zf.open(zi, "w", force_zip64=True) as w:
            src = _Repeat(line, size)
            while chunk := src.read(1 << 20):
                w.write(chunk)
    return buf.getvalue()


def tar_long_name_bomb(size: int, after=()) -> bytes:
    """A tar.gz whose first header is a GNU long name of ``size`` bytes (tarfile reads such a
    name into memory whole), followed by ordinary members."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as g:
        ti = tarfile.TarInfo("././@LongLink")
        ti.type, ti.size = tarfile.GNUTYPE_LONGNAME, size
        g.write(ti.tobuf(format=tarfile.GNU_FORMAT))
        src = _Repeat(b"a", size)
        while chunk := src.read(1 << 20):
            g.write(chunk)
        g.write(b"\0" * (-size % 512))
        with tarfile.open(fileobj=g, mode="w|", format=tarfile.GNU_FORMAT) as tf:
            tar_member(tf, "x.txt", b"x\n")
            for name, data in after:
                tar_member(tf, name, data)
    return buf.getvalue()


def tar_header_chain(n: int, before=()) -> bytes:
    """A tar.gz: members, then ``n`` GNU long-name headers in a row (tarfile follows such a chain
    recursively, one call per header)."""
    raw = io.BytesIO()
    for name, data in before:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        raw.write(ti.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512))
    link = tarfile.TarInfo("././@LongLink")
    link.type, link.size = tarfile.GNUTYPE_LONGNAME, 5
    raw.write((link.tobuf(format=tarfile.GNU_FORMAT) + b"name\0".ljust(512, b"\0")) * n)
    raw.write(b"\0" * 1024)
    return gzip.compress(raw.getvalue(), mtime=0)


# ---------------------------------------------------------------------------------------------
# checks

def snapshot(root: Path) -> set[str]:
    """Every path under ``root`` (files, folders, links), relative, as text."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
    return out


def analyse(svc, path, title: str | None = None, limit_s: float = 30.0) -> dict:
    """submit_path + analyze; the analysis must complete (no exception) within ``limit_s``."""
    t0 = time.perf_counter()
    sub = svc.submit_path(path, title)
    rep = svc.analyze(sub.incident_id)
    took = time.perf_counter() - t0
    assert took < limit_s, f"analysis took {took:.1f} s"
    return rep


STATUSES = {"parsed", "partial", "text", "unrecognized", "failed"}


def check_sources(rep: dict) -> dict[str, dict]:
    """Every source row has a known status, and every row that is not cleanly parsed says why."""
    out = {}
    for s in rep["sources"]:
        assert s["status"] in STATUSES, s
        if s["status"] != "parsed":
            assert s["error"] and isinstance(s["error"], str), s
            assert len(s["error"]) < 2000, s["error"][:300]
        assert s["path"] not in out, f"two rows for {s['path']!r}"
        out[s["path"]] = s
    return out
