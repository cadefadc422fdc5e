"""Property-based fuzzing (hypothesis) of every registered parser's detect and parse, of the group
parsers and of archive extraction, on real files mutated: bit flips, cuts, NULs, huge and
non-finite numbers, random bytes, lines repeated or dropped, and splices of two formats.

Properties: a detector answers True or False and never raises; ``parse_file`` always returns a
result (it never raises, never hangs: each example has a deadline) with a known status, and a
file is only ever 'failed' with a message that names it; extraction never raises and never
writes outside its folder.

The budget is small and the examples are derived from the test names (``derandomize``), so CI
runs the same cases every time in well under a minute. For a longer, random exploration:
``AFTERTRACE_FUZZ=explore AFTERTRACE_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/hostile/test_fuzz.py``.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hostile_corpus as hc
from aftertrace.ingest.bundle import IntakeLimits, extract, store_raw
from aftertrace.ingest.parse import ParseJob, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry, write_group_manifest

REGISTRY = default_registry()
PARSERS = sorted(hc.SAMPLES)
EXPLORE = os.environ.get("AFTERTRACE_FUZZ") == "explore"


def _budget(n: int):
    return settings(max_examples=int(os.environ.get("AFTERTRACE_FUZZ_EXAMPLES", n)),
                    deadline=timedelta(seconds=20), derandomize=not EXPLORE, database=None,
                    print_blob=True, suppress_health_check=list(HealthCheck))


HEAD = 12 * 1024          # the fuzzed part of each sample (detection reads the first 64 KiB)
SAMPLE = {p: hc.real(p) for p in PARSERS}
NUMBERS = [b"9" * 30, b"-" + b"9" * 25, b"18446744073709551616", b"9223372036854775808", b"1e400", b"-1e400",
           b"NaN", b"Infinity", b"0x7fffffffffffffffff", b"99:99:99", b"2026-13-32", b"\xff\xfe", b"\x00" * 8]


@st.composite
def mutated(draw, parser: str) -> bytes:
    """A real sample of ``parser`` with 1 to 6 random edits."""
    data = bytearray(SAMPLE[parser][1][:HEAD])
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            data = bytearray(b"\n")
        op = draw(st.sampled_from(["flip", "cut", "nul", "number", "bytes", "repeat", "drop", "splice"]))
        at = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at:]
        elif op == "nul":
            data[at:at] = b"\x00" * draw(st.integers(1, 16))
        elif op == "number":
            data[at:at] = draw(st.sampled_from(NUMBERS))
        elif op == "bytes":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif op == "repeat":
            end = min(len(data), at + draw(st.integers(1, 400)))
            data[at:at] = data[at:end] * draw(st.integers(2, 50))
        elif op == "drop":
            del data[at:at + draw(st.integers(1, 400))]
        else:   # the rest of the file taken from another format's real file
            other = SAMPLE[draw(st.sampled_from(PARSERS))][1][:HEAD]
            data[at:] = other[draw(st.integers(0, max(0, len(other) - 1))):]
    return bytes(data)


def _check(res, name: str) -> None:
    assert res.rel == name and res.status in hc.STATUSES
    if res.status != "parsed":
        assert res.error, res
    if res.status == "failed":
        assert res.error.startswith(f"{name}: "), res.error


@pytest.mark.parametrize("parser", PARSERS)
def test_fuzz_detect(parser):
    @_budget(40)
    @given(data=mutated(parser))
    def run(data):
        head = Head.from_bytes(SAMPLE[parser][0], data[:64 * 1024], complete=True)
        for p in REGISTRY.parsers:
            assert p.detect(head) in (True, False), p.name
        REGISTRY.detect(head)

    run()


@pytest.mark.parametrize("parser", PARSERS)
def test_fuzz_parse(parser):
    """The parser that claims the real file, forced onto its mutations (no detection in between:
    the harshest case), and the whole detect + parse path of parse_file on the same bytes."""
    name = SAMPLE[parser][0]

    @_budget(8)
    @given(data=mutated(parser))
    def run(data):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / name
            f.write_bytes(data)
            forced = parse_file(ParseJob(str(f), name, f"{d}/forced", 16 * 1024**2, parser=parser), REGISTRY)
            _check(forced, name)
            if forced.status == "failed":   # forced on bytes it would not have claimed: said clearly
                assert f"parser {parser} failed" in forced.error or "cannot" in forced.error, forced.error
            natural = parse_file(ParseJob(str(f), name, f"{d}/natural", 16 * 1024**2), REGISTRY)
            _check(natural, name)
            assert natural.status != "failed", natural.error

    run()


def _snapshot_series(tmp: Path) -> list[tuple[str, str]]:
    with tarfile.open(hc.DATA / "cgroup/recorded/snapdirs.tar.gz") as tf:
        tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return sorted((p.relative_to(tmp).as_posix(), str(p)) for p in tmp.rglob("*") if p.is_file())


@pytest.mark.parametrize("source", ["snapshot_series", "point_in_time_tree"])
def test_fuzz_group_parsers(source):
    """cgroup snapshot series and /sys/fs/cgroup copies (one source made of many files) with one of
    their real member files mutated."""
    @_budget(6)
    @given(st.data())
    def run(data):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d) / "in"
            if source == "snapshot_series":
                files = _snapshot_series(root)
            else:
                shutil.copytree(hc.DATA / "cgroup/elastic_docker", root)
                files = sorted((p.relative_to(root).as_posix(), str(p)) for p in root.rglob("*") if p.is_file())
            rel, disk = data.draw(st.sampled_from(files))
            raw = Path(disk).read_bytes()
            edit = data.draw(st.sampled_from(["number", "flip", "cut", "bytes", "empty"]))
            at = data.draw(st.integers(0, max(0, len(raw) - 1)))
            raw = {"number": lambda: raw[:at] + data.draw(st.sampled_from(NUMBERS)) + raw[at:],
                   "flip": lambda: raw[:at] + bytes([(raw[at:at + 1] or b"\0")[0] ^ 0x40]) + raw[at + 1:],
                   "cut": lambda: raw[:at], "bytes": lambda: raw[:at] + data.draw(st.binary(max_size=64)) + raw[at:],
                   "empty": lambda: b""}[edit]()
            Path(disk).write_bytes(raw)
            groups = REGISTRY.claim_groups(files)
            for n, (parser, g) in enumerate(groups):
                man = write_group_manifest(g, Path(d) / f"group{n}.json")
                res = parse_file(ParseJob(man, g.rel, f"{d}/out{n}", 16 * 1024**2, parser=parser.name), REGISTRY)
                _check(res, g.rel)
                assert res.status != "failed", res.error

    run()


def _archives() -> dict[str, bytes]:
    files = [("n0/dmesg.txt", SAMPLE["dmesg_raw"][1][:4000]), ("n0/app.log", SAMPLE["app_log"][1][:4000]),
             ("n1/" + "x" * 150 + "/nccl.log", SAMPLE["nccl_log"][1])]
    out = {k: hc.tar_bytes(files, m) for k, m in (("tar", "w"), ("tgz", "w:gz"), ("txz", "w:xz"), ("tbz", "w:bz2"))}
    out["zip"] = hc.zip_bytes(files, symlinks=[("n0/link", "../x")])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files:
            ti = tarfile.TarInfo(name)
            ti.size, ti.pax_headers = len(data), {"comment": "x" * 300}
            tf.addfile(ti, io.BytesIO(data))
    out["pax"] = buf.getvalue()
    return out


ARCHIVES = _archives()


@_budget(60)
@given(kind=st.sampled_from(sorted(ARCHIVES)), data=st.data())
def test_fuzz_archive_extraction(kind, data):
    blob = bytearray(ARCHIVES[kind])
    for _ in range(data.draw(st.integers(1, 5))):
        at = data.draw(st.integers(0, len(blob) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "bytes", "zero"]))
        if op == "flip":
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del blob[max(1, at):]
        elif op == "bytes":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=32))
        else:
            blob[at:at + 16] = b"\0" * 16
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        src = d / f"bundle.{kind}"
        src.write_bytes(bytes(blob))
        raw = store_raw(src, d / "bundles")
        before = hc.snapshot(d)
        ex = extract(raw, d / "files", IntakeLimits(max_members=500, max_member_bytes=1 << 20, max_total_bytes=4 << 20))
        new = hc.snapshot(d) - before
        assert all(p == "files" or p.startswith("files/") for p in new), sorted(new)[:5]
        paths = [m.path for m in ex.members]
        assert len(paths) == len(set(paths))
        for m in ex.members:
            assert m.status in ("ok", "refused", "alias", "skipped")
            assert m.ok or m.message
            m.path.encode("utf-8")          # storable text
            if m.ok:
                assert (d / "files") in m.file.parents
                assert not m.file.is_symlink()
