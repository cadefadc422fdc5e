"""Bundle intake: store_raw / store_stream / sniff_kind / extract / safe_relpath.

Every archive is built here, in tmp_path, with tarfile/zipfile, so each test
states exactly which bytes go in and which files must come out.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from aftertrace.ingest.bundle import (IntakeError, IntakeLimits, extract, safe_relpath, sniff_kind,
                           store_raw, store_stream)
from aftertrace.ingest.reader import Head, open_binary

# ---------------------------------------------------------------------------
# helpers


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(root: Path, exclude: Path) -> set[str]:
    """Every path under root (files, dirs, links), except those inside ``exclude``."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if d == exclude or exclude in d.parents:
            dirnames[:] = []
            continue
        for n in dirnames + filenames:
            p = d / n
            if p == exclude:
                continue
            out.add(p.relative_to(root).as_posix())
    return out


def assert_nothing_outside(tmp_path: Path, dest: Path, before: set[str]) -> None:
    after = snapshot(tmp_path, dest)
    assert after == before, f"written outside the extraction folder: {sorted(after - before)}"
    strays = [p for p in tmp_path.rglob("*evil*") if dest not in p.parents]
    assert strays == [], strays


def _ti(name: str, type_=tarfile.REGTYPE, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.size = size
    ti.mode = 0o644
    ti.mtime = 1_700_000_000
    ti.linkname = linkname
    return ti


def add_file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    tf.addfile(_ti(name, size=len(data)), io.BytesIO(data))


def add_special(tf: tarfile.TarFile, name: str, type_, linkname: str = "") -> None:
    tf.addfile(_ti(name, type_, 0, linkname))


def make_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> bytes:
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            add_file(tf, name, data)
    return path.read_bytes()


def make_zip(path: Path, members: list[tuple[str, bytes]],
             compression=zipfile.ZIP_DEFLATED) -> bytes:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path.read_bytes()


def by_path(ex) -> dict:
    return {m.path: m for m in ex.members}


NESTED = [
    ("top.txt", b"top level\n"),
    ("a/b/c/file.log", b"[    1.000000] deep file\n"),
    ("node-3/dmesg.txt", b"[ 7063.247407] x\n" * 50),
    ("empty.txt", b""),
]


@pytest.fixture()
def bundles(tmp_path: Path) -> Path:
    return tmp_path / "bundles"


def check_extracted(ex, dest: Path, members=NESTED) -> None:
    files = {m.path: m for m in ex.files}
    assert sorted(files) == sorted(n for n, _ in members)
    for name, data in members:
        m = files[name]
        assert m.status == "ok" and m.message == ""
        assert m.size == len(data)
        assert m.file == dest.joinpath(*name.split("/"))
        assert m.file.read_bytes() == data
    assert ex.stopped is None


# ---------------------------------------------------------------------------
# accepted inputs


@pytest.mark.parametrize("suffix,mode,comp,ext", [
    (".tar", "w", None, ".tar"),
    (".tar.gz", "w:gz", "gzip", ".tar.gz"),
    (".tgz", "w:gz", "gzip", ".tar.gz"),
    (".tar.xz", "w:xz", "xz", ".tar.xz"),
    (".tar.bz2", "w:bz2", "bzip2", ".tar.bz2"),
])
def test_tar_variants_stored_by_sha_and_extracted(tmp_path, bundles, suffix, mode, comp, ext):
    src = tmp_path / f"bundle{suffix}"
    data = make_tar(src, NESTED, mode)
    assert sniff_kind(src) == ("tar", comp)
    raw = store_raw(src, bundles)
    assert raw.kind == "tar"
    assert raw.compression == comp
    assert raw.sha256 == sha256(data)
    assert raw.name == src.name
    assert raw.bytes == len(data)
    assert raw.raw_path == bundles / f"{sha256(data)}{ext}"
    assert raw.raw_path.read_bytes() == data
    assert sorted(p.name for p in bundles.iterdir()) == [raw.raw_path.name]   # no temp left
    dest = tmp_path / "inc" / "files"
    ex = extract(raw, dest)
    check_extracted(ex, dest)


def test_zip_stored_by_sha_and_extracted(tmp_path, bundles):
    src = tmp_path / "bundle.zip"
    data = make_zip(src, NESTED)
    assert sniff_kind(src) == ("zip", None)
    raw = store_raw(src, bundles)
    assert (raw.kind, raw.compression, raw.sha256) == ("zip", None, sha256(data))
    assert raw.raw_path == bundles / f"{sha256(data)}.zip"
    dest = tmp_path / "inc" / "files"
    check_extracted(extract(raw, dest), dest)


def test_storing_the_same_archive_twice_keeps_one_copy(tmp_path, bundles):
    src = tmp_path / "b.tar"
    make_tar(src, NESTED)
    r1 = store_raw(src, bundles)
    r2 = store_raw(src, bundles)
    assert r1.sha256 == r2.sha256 and r1.raw_path == r2.raw_path
    assert [p.name for p in bundles.iterdir()] == [r1.raw_path.name]


def _write_tree(root: Path, files: list[tuple[str, bytes]], mtime: int) -> None:
    for name, data in files:
        p = root.joinpath(*name.split("/"))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (mtime, mtime))


def test_directory_same_tree_same_sha_changed_byte_new_sha(tmp_path, bundles):
    t1, t2, t3, t4 = (tmp_path / n for n in ("t1", "t2", "t3", "t4"))
    _write_tree(t1, NESTED, 1_600_000_000)
    _write_tree(t2, list(reversed(NESTED)), 1_700_000_000)   # other order, other mtimes
    changed = [(n, d.replace(b"deep", b"Deep")) for n, d in NESTED]
    _write_tree(t3, changed, 1_600_000_000)
    renamed = [("top2.txt" if n == "top.txt" else n, d) for n, d in NESTED]
    _write_tree(t4, renamed, 1_600_000_000)

    r1 = store_raw(t1, bundles)
    r2 = store_raw(t2, bundles)
    r3 = store_raw(t3, bundles)
    r4 = store_raw(t4, bundles)
    assert len(r1.sha256) == 64 and int(r1.sha256, 16) >= 0
    assert r1.sha256 == r2.sha256
    assert r3.sha256 != r1.sha256
    assert r4.sha256 != r1.sha256
    assert r1.raw_path == bundles / f"{r1.sha256}.tar"
    assert r1.kind == "tar" and r1.name == "t1"
    assert r1.bytes == sum(len(d) for _, d in NESTED)
    # the same tree twice is one stored copy; nothing temporary is left behind
    assert sorted(p.name for p in bundles.iterdir()) == sorted(
        {f"{r.sha256}.tar" for r in (r1, r3, r4)})
    dest = tmp_path / "inc" / "files"
    check_extracted(extract(r1, dest), dest)


def test_directory_symlink_is_recorded_not_followed(tmp_path, bundles):
    tree = tmp_path / "tree"
    _write_tree(tree, [("ok.txt", b"ok\n")], 1_600_000_000)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"do not copy\n")
    (tree / "out").symlink_to(secret)
    (tree / "in").symlink_to("ok.txt")
    raw = store_raw(tree, bundles)
    with tarfile.open(raw.raw_path) as tf:
        assert b"do not copy" not in b"".join(
            tf.extractfile(m).read() for m in tf.getmembers() if m.isreg())
    dest = tmp_path / "inc" / "files"
    ex = extract(raw, dest)
    m = by_path(ex)
    assert m["ok.txt"].status == "ok"
    assert m["out"].status == "refused" and "outside" in m["out"].message
    assert m["in"].status == "alias" and "ok.txt" in m["in"].message
    assert sorted(p.name for p in dest.iterdir()) == ["ok.txt"]


def test_directory_with_fifo_is_stored_without_blocking(tmp_path, bundles):
    tree = tmp_path / "tree"
    _write_tree(tree, [("ok.txt", b"ok\n")], 1_600_000_000)
    os.mkfifo(tree / "evil_fifo")
    raw = store_raw(tree, bundles)
    ex = extract(raw, tmp_path / "inc" / "files")
    assert [(m.path, m.status, m.message) for m in ex.members] == [
        ("evil_fifo", "refused", "refused: FIFO"), ("ok.txt", "ok", "")]


def test_single_plain_file(tmp_path, bundles):
    src = tmp_path / "dmesg.txt"
    data = b"[    0.000000] Linux version 6.1\n[    1.500000] hello\n"
    src.write_bytes(data)
    assert sniff_kind(src) == ("file", None)
    raw = store_raw(src, bundles)
    assert (raw.kind, raw.compression, raw.sha256, raw.bytes) == ("file", None, sha256(data), len(data))
    assert raw.raw_path == bundles / f"{sha256(data)}.bin"
    dest = tmp_path / "inc" / "files"
    ex = extract(raw, dest)
    assert [(m.path, m.status, m.size) for m in ex.members] == [("dmesg.txt", "ok", len(data))]
    assert (dest / "dmesg.txt").read_bytes() == data
    assert ex.stopped is None


@pytest.mark.parametrize("kernel", ["copy_file_range", "in steps", "refused", "absent"])
def test_a_single_file_is_copied_whole_and_named_by_the_hash_of_the_copy(tmp_path, bundles, monkeypatch, kernel):
    """The kernel's copy where it can, a step at a time with the hash of the copy one step behind
    (a file system that refuses it, or a platform without it: reads and writes): the same bytes
    and the same name either way, from where the file is read."""
    import errno as _errno
    import aftertrace.ingest.bundle as B
    data = _incompressible(3 * (1 << 20) + 12_345, 7)        # (more than one read of the fallback)
    src = tmp_path / "perf.txt"
    src.write_bytes(data)
    calls = []
    if kernel == "refused":
        def refuse(*a):
            calls.append(a)
            raise OSError(_errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(B.os, "copy_file_range", refuse)
    elif kernel == "absent":
        monkeypatch.delattr(B.os, "copy_file_range")
    elif kernel == "in steps":
        real = os.copy_file_range
        monkeypatch.setattr(B, "COPY_STEP", 1 << 20)
        monkeypatch.setattr(B.os, "copy_file_range", lambda *a: calls.append(a) or real(*a))
    raw = store_raw(src, bundles)
    assert (raw.kind, raw.sha256, raw.bytes) == ("file", sha256(data), len(data))
    assert raw.raw_path.read_bytes() == data
    assert len(calls) == {"refused": 1, "in steps": 5}.get(kernel, 0)     # (4 steps, then the end)
    assert [p.name for p in bundles.iterdir()] == [raw.raw_path.name]       # no temporary copy left
    with open(src, "rb") as f:        # (from the file's position: what the caller has not read)
        f.seek(100)
        out = tmp_path / "tail"
        with open(out, "wb") as o:
            assert B._copy_file(f, o) == len(data) - 100
        assert out.read_bytes() == data[100:]


def test_a_full_disk_while_a_single_file_is_copied_is_named_and_leaves_nothing(tmp_path, bundles, monkeypatch):
    import errno as _errno
    import aftertrace.ingest.bundle as B
    src = tmp_path / "perf.txt"
    src.write_bytes(b"x" * 100_000)
    sizes = iter([65_536])
    real = os.copy_file_range

    def fill(fin, fout, count):      # the kernel copies a first piece, then the disk is full
        n = next(sizes, None)
        if n is None:
            raise OSError(_errno.ENOSPC, "No space left on device")
        return real(fin, fout, n)
    monkeypatch.setattr(B.os, "copy_file_range", fill)
    with pytest.raises(B.DiskFull, match="perf.txt: not stored"):
        store_raw(src, bundles)
    assert list(bundles.iterdir()) == []


def test_single_gz_file_kept_compressed_and_read_transparently(tmp_path, bundles):
    text = b"[    0.000000] Linux version 6.1\n[    1.500000] hello\n"
    gz = gzip.compress(text, mtime=0)
    src = tmp_path / "dmesg.log.gz"
    src.write_bytes(gz)
    assert sniff_kind(src) == ("file", "gzip")
    raw = store_raw(src, bundles)
    assert (raw.kind, raw.compression, raw.sha256) == ("file", "gzip", sha256(gz))
    assert raw.raw_path == bundles / f"{sha256(gz)}.gz"
    dest = tmp_path / "inc" / "files"
    ex = extract(raw, dest)
    assert [(m.path, m.status) for m in ex.members] == [("dmesg.log.gz", "ok")]
    assert (dest / "dmesg.log.gz").read_bytes() == gz          # kept compressed
    with open_binary(dest / "dmesg.log.gz") as f:
        assert f.read() == text


def test_single_gz_without_gz_name_gets_the_suffix(tmp_path, bundles):
    src = tmp_path / "dmesg"
    src.write_bytes(gzip.compress(b"[    1.000000] x\n"))
    raw = store_raw(src, bundles)
    ex = extract(raw, tmp_path / "d")
    assert [m.path for m in ex.members] == ["dmesg.gz"]


def test_multi_member_gzip_reads_both_members(tmp_path, bundles):
    part1 = b"nvidia-bug-report.sh will now collect information\n" + b"A" * 3000 + b"\n"
    part2 = b"____________________________________________\nSecond member: nvidia-smi -q\n"
    gz = gzip.compress(part1, mtime=0) + gzip.compress(part2, mtime=0)
    src = tmp_path / "nvidia-bug-report.log.gz"
    src.write_bytes(gz)
    assert sniff_kind(src) == ("file", "gzip")
    raw = store_raw(src, bundles)
    assert raw.sha256 == sha256(gz)
    dest = tmp_path / "inc" / "files"
    ex = extract(raw, dest)
    f = dest / "nvidia-bug-report.log.gz"
    assert [m.path for m in ex.files] == ["nvidia-bug-report.log.gz"]
    with open_binary(f) as s:
        assert s.read() == part1 + part2
    head = Head.read(f, "nvidia-bug-report.log.gz")
    assert head.complete and head.data == part1 + part2
    assert head.lines[-1] == "Second member: nvidia-smi -q"


def test_store_stream_names_by_sha(tmp_path, bundles):
    data = make_zip(tmp_path / "x.zip", NESTED)
    raw = store_stream(io.BytesIO(data), "upload.zip", bundles)
    assert (raw.kind, raw.sha256, raw.name, raw.bytes) == ("zip", sha256(data), "upload.zip", len(data))
    assert [p.name for p in bundles.iterdir()] == [f"{sha256(data)}.zip"]


# ---------------------------------------------------------------------------
# safe_relpath


@pytest.mark.parametrize("name,expected", [
    ("a/b/c.txt", "a/b/c.txt"),
    ("./a//b/./c.txt", "a/b/c.txt"),
    ("a/b/", "a/b"),
    ("../evil", None),
    ("a/../../evil", None),
    ("a/../b", None),            # any '..' is refused, even one that stays inside
    ("/etc/evil", None),
    ("C:/evil", None),
    ("c:evil", None),
    ("", None),
    (".", None),
    ("a\x00b", None),
    ("..\\evil", "..\\evil"),    # backslash is a plain character in tar names
])
def test_safe_relpath(name, expected):
    assert safe_relpath(name) == expected


def test_safe_relpath_is_its_definition_on_any_name():
    """The parts of the name that are not empty or "."; None for an absolute name, a drive, a
    NUL, any ".." part, or nothing left (names already normal are returned without splitting)."""
    import random

    def defined(name, backslash):
        if not name or "\x00" in name:
            return None
        name = name.replace("\\", "/") if backslash else name
        if name.startswith("/") or (len(name) >= 2 and name[1] == ":" and name[0].isalpha()):
            return None
        parts = name.split("/")
        return None if ".." in parts else "/".join(p for p in parts if p not in ("", ".")) or None
    rng = random.Random(3)
    pieces = ["a", "b", ".", "..", "/", "\\", ":", "c:", "...", ".a", "a.", " ", "\x00", "\u00e9"]
    for _ in range(50_000):
        name = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        for backslash in (False, True):
            assert safe_relpath(name, backslash) == defined(name, backslash), (name, backslash)


@pytest.mark.parametrize("name,expected", [
    ("..\\evil", None),
    ("a\\b\\c.txt", "a/b/c.txt"),
    ("C:\\evil", None),
    ("\\evil", None),
])
def test_safe_relpath_backslash_is_separator(name, expected):
    assert safe_relpath(name, backslash_is_sep=True) == expected


# ---------------------------------------------------------------------------
# hostile archives


def _extract_checked(tmp_path: Path, raw, limits=IntakeLimits()):
    dest = tmp_path / "incident" / "files"
    dest.parent.mkdir(parents=True, exist_ok=True)
    before = snapshot(tmp_path, dest)
    ex = extract(raw, dest, limits)
    assert_nothing_outside(tmp_path, dest, before)
    return ex, dest


@pytest.mark.parametrize("evil,why", [
    ("../evil", "'..'"),
    ("a/../../evil", "'..'"),
    ("/etc/evil", "absolute path"),
    ("ABS", "absolute path"),        # replaced below by an absolute path into tmp_path
])
def test_tar_path_escape_refused(tmp_path, bundles, evil, why):
    if evil == "ABS":
        evil = str(tmp_path / "outside" / "evil")
        (tmp_path / "outside").mkdir()
    existed = os.path.lexists("/etc/evil")
    src = tmp_path / "hostile.tar"
    with tarfile.open(src, "w", format=tarfile.PAX_FORMAT) as tf:
        add_file(tf, "good1.txt", b"one\n")
        add_special(tf, evil + "_dir", tarfile.DIRTYPE)     # folders are never created as such
        add_file(tf, evil, b"pwned\n")
        add_file(tf, "sub/good2.txt", b"two\n")
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    m = by_path(ex)
    assert m[evil].status == "refused"
    assert why in m[evil].message and "outside the incident folder" in m[evil].message
    assert (dest / "good1.txt").read_bytes() == b"one\n"
    assert (dest / "sub" / "good2.txt").read_bytes() == b"two\n"
    assert [x.path for x in ex.files] == ["good1.txt", "sub/good2.txt"]
    assert ex.stopped is None
    assert os.path.lexists("/etc/evil") == existed


def test_tar_links_devices_fifos_duplicates(tmp_path, bundles):
    src = tmp_path / "hostile.tar.gz"
    with tarfile.open(src, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        add_file(tf, "good.txt", b"first copy\n")
        add_special(tf, "sym_abs", tarfile.SYMTYPE, "/etc/passwd")
        add_special(tf, "sub/sym_up", tarfile.SYMTYPE, "../../x")
        add_special(tf, "hard_up", tarfile.LNKTYPE, "../outside.txt")
        add_special(tf, "hard_abs", tarfile.LNKTYPE, "/etc/passwd")
        add_special(tf, "sub/alias", tarfile.SYMTYPE, "../good.txt")
        add_special(tf, "hard_in", tarfile.LNKTYPE, "good.txt")
        add_special(tf, "dev/evil_null", tarfile.CHRTYPE)
        add_special(tf, "dev/evil_blk", tarfile.BLKTYPE)
        add_special(tf, "evil_fifo", tarfile.FIFOTYPE)
        add_file(tf, "good.txt", b"second copy\n")
        add_file(tf, "./good.txt", b"third copy\n")
        add_file(tf, "sub/after.txt", b"after\n")
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    got = [(m.path, m.status) for m in ex.members]
    assert got == [
        ("good.txt", "ok"),
        ("sym_abs", "refused"),
        ("sub/sym_up", "refused"),
        ("hard_up", "refused"),
        ("hard_abs", "refused"),
        ("sub/alias", "alias"),
        ("hard_in", "alias"),
        ("dev/evil_null", "refused"),
        ("dev/evil_blk", "refused"),
        ("evil_fifo", "refused"),
        ("good.txt (copy 2)", "refused"),       # one row per path (the sources table needs it)
        ("good.txt (copy 3)", "refused"),
        ("sub/after.txt", "ok"),
    ]
    msg = {(m.path, i): m.message for i, m in enumerate(ex.members)}
    for i, name in ((1, "sym_abs"), (2, "sub/sym_up"), (3, "hard_up"), (4, "hard_abs")):
        assert "points outside the bundle" in msg[(name, i)]
    assert "/etc/passwd" in msg[("sym_abs", 1)] and "../../x" in msg[("sub/sym_up", 2)]
    assert "link to good.txt inside the bundle" in msg[("sub/alias", 5)]
    assert "link to good.txt inside the bundle" in msg[("hard_in", 6)]
    assert msg[("dev/evil_null", 7)] == "refused: device file"
    assert msg[("dev/evil_blk", 8)] == "refused: device file"
    assert msg[("evil_fifo", 9)] == "refused: FIFO"
    assert "duplicate" in msg[("good.txt (copy 2)", 10)] and "duplicate" in msg[("good.txt (copy 3)", 11)]
    assert (dest / "good.txt").read_bytes() == b"first copy\n"
    assert (dest / "sub" / "after.txt").read_bytes() == b"after\n"
    # no link, device or FIFO was created anywhere
    for p in dest.rglob("*"):
        st = p.lstat()
        assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), p
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "good.txt", "sub", "sub/after.txt"]
    assert ex.stopped is None


def test_tar_symlink_then_file_through_it_stays_inside(tmp_path, bundles):
    """The classic: a link to a folder outside, then a file 'through' the link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    src = tmp_path / "hostile.tar"
    with tarfile.open(src, "w", format=tarfile.PAX_FORMAT) as tf:
        add_special(tf, "escape", tarfile.SYMTYPE, str(outside))
        add_file(tf, "escape/evil.txt", b"pwned\n")
        add_file(tf, "real/x.txt", b"x\n")
        add_special(tf, "loop", tarfile.SYMTYPE, "real")
        add_file(tf, "loop/evil2.txt", b"inside\n")
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    assert list(outside.iterdir()) == []
    st = by_path(ex)
    assert st["escape"].status == "refused"
    assert st["loop"].status == "alias"
    assert (dest / "escape" / "evil.txt").read_bytes() == b"pwned\n"   # a real folder inside
    assert not (dest / "escape").is_symlink()
    assert "link to real inside the bundle" in st["loop"].message
    assert (dest / "loop" / "evil2.txt").read_bytes() == b"inside\n"   # a real folder, not the link
    assert not (dest / "loop").is_symlink()


def test_tar_file_and_folder_of_the_same_name(tmp_path, bundles):
    src = tmp_path / "b.tar"
    make_tar(src, [("a", b"file a\n"), ("a/b.txt", b"b\n"), ("c/d.txt", b"d\n"), ("c", b"file c\n"),
                   ("ok.txt", b"ok\n")])
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    assert [(m.path, m.status) for m in ex.members] == [
        ("a", "ok"), ("a/b.txt", "refused"), ("c/d.txt", "ok"), ("c", "refused"), ("ok.txt", "ok")]
    assert (dest / "a").read_bytes() == b"file a\n"
    assert (dest / "ok.txt").read_bytes() == b"ok\n"


def test_archiver_noise_is_skipped(tmp_path, bundles):
    src = tmp_path / "mac.zip"
    make_zip(src, [("__MACOSX/._x.txt", b"meta"), ("d/.DS_Store", b"meta"), ("x.txt", b"x\n")])
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    assert [(m.path, m.status) for m in ex.members] == [
        ("__MACOSX/._x.txt", "skipped"), ("d/.DS_Store", "skipped"), ("x.txt", "ok")]
    assert sorted(p.name for p in dest.iterdir()) == ["x.txt"]


def _zip_symlink(zf: zipfile.ZipFile, name: str, target: str) -> None:
    zi = zipfile.ZipInfo(name)
    zi.create_system = 3   # unix
    zi.external_attr = (stat.S_IFLNK | 0o777) << 16
    zf.writestr(zi, target)


def test_zip_hostile_members(tmp_path, bundles):
    outside = tmp_path / "outside"
    outside.mkdir()
    src = tmp_path / "hostile.zip"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("good.txt", b"first\n")
        zf.writestr("..\\evil", b"pwned\n")
        zf.writestr("../evil2", b"pwned\n")
        zf.writestr("a/../../evil3", b"pwned\n")
        zf.writestr(str(outside / "evil4"), b"pwned\n")
        zf.writestr("C:\\evil5", b"pwned\n")
        _zip_symlink(zf, "link_abs", "/etc/passwd")
        _zip_symlink(zf, "sub/link_up", "../../x")
        _zip_symlink(zf, "sub/link_in", "../good.txt")
        fifo = zipfile.ZipInfo("evil_fifo")
        fifo.create_system = 3
        fifo.external_attr = (stat.S_IFIFO | 0o644) << 16
        zf.writestr(fifo, b"")
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("good.txt", b"second\n")
        zf.writestr("sub/after.txt", b"after\n")
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    got = [(m.path, m.status) for m in ex.members]
    assert got == [
        ("good.txt", "ok"),
        ("..\\evil", "refused"),
        ("../evil2", "refused"),
        ("a/../../evil3", "refused"),
        (str(outside / "evil4"), "refused"),
        ("C:\\evil5", "refused"),
        ("link_abs", "refused"),
        ("sub/link_up", "refused"),
        ("sub/link_in", "alias"),
        ("evil_fifo", "refused"),
        ("good.txt (copy 2)", "refused"),
        ("sub/after.txt", "ok"),
    ]
    m = ex.members
    assert "'..'" in m[1].message and "'..'" in m[2].message and "'..'" in m[3].message
    assert "absolute path" in m[4].message and "absolute path" in m[5].message
    assert "points outside the bundle" in m[6].message and "/etc/passwd" in m[6].message
    assert "points outside the bundle" in m[7].message
    assert "link to good.txt inside the bundle" in m[8].message
    assert m[9].message == "refused: special file"
    assert "duplicate" in m[10].message
    assert (dest / "good.txt").read_bytes() == b"first\n"
    assert (dest / "sub" / "after.txt").read_bytes() == b"after\n"
    assert list(outside.iterdir()) == []
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "good.txt", "sub", "sub/after.txt"]


def test_zip_encrypted_member_refused(tmp_path, bundles):
    src = tmp_path / "enc.zip"
    make_zip(src, [("secret.txt", b"hidden\n"), ("plain.txt", b"plain\n")], zipfile.ZIP_STORED)
    data = bytearray(src.read_bytes())
    # set the 'encrypted' flag bit of the first member in both headers
    lh = data.index(b"PK\x03\x04")
    data[lh + 6] |= 1
    ch = data.index(b"PK\x01\x02")
    data[ch + 8] |= 1
    src.write_bytes(bytes(data))
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    assert [(m.path, m.status) for m in ex.members] == [("secret.txt", "refused"), ("plain.txt", "ok")]
    assert ex.members[0].message == "refused: encrypted member"


# ---------------------------------------------------------------------------
# limits


def test_total_limit_stops_a_tar_gz_bomb_and_keeps_earlier_members(tmp_path, bundles):
    src = tmp_path / "bomb.tar.gz"
    make_tar(src, [("first.txt", b"kept\n"), ("zeros.bin", bytes(3 * 1024 * 1024)),
                   ("after.txt", b"after\n")], "w:gz")
    assert src.stat().st_size < 20_000
    limits = IntakeLimits(max_total_bytes=1_000_000)
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), limits)
    assert [(m.path, m.status) for m in ex.members] == [("first.txt", "ok"), ("zeros.bin", "refused")]
    assert "1000000" in ex.members[1].message and "limit" in ex.members[1].message
    assert ex.stopped is not None and "1000000" in ex.stopped and "limit" in ex.stopped
    assert sorted(p.name for p in dest.iterdir()) == ["first.txt"]     # no partial zeros.bin
    assert (dest / "first.txt").read_bytes() == b"kept\n"


def test_a_bundle_expands_to_at_most_its_ratio_times_its_size(tmp_path, bundles):
    # many members each under the per-file limit, far under the total limit, 1000x compressed: the
    # expansion stops at 200x the bundle (past the floor), what came before is kept, the rest named
    line = b"[ 1234.567890] ib0: link up, 400 Gbps, the same line every time\n"
    src = tmp_path / "bomb.zip"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("node-0/dmesg.txt", b"real\n")
        for i in range(40):
            zf.writestr(f"node-0/copy{i:02d}.log", line * (3_000_000 // len(line)))
    raw = store_raw(src, bundles)
    limits = IntakeLimits(max_member_bytes=4_000_000, ratio_floor_bytes=8_000_000, max_ratio=200)
    allowed = limits.expansion_limit(raw.bytes)
    assert allowed == 200 * raw.bytes and 8_000_000 < allowed < 40 * 3_000_000
    ex, dest = _extract_checked(tmp_path, raw, limits)
    ok = [m for m in ex.members if m.status == "ok"]
    assert ex.members[0].path == "node-0/dmesg.txt" and ok[0] is ex.members[0]
    assert allowed - 3_000_000 < sum(m.size for m in ok) <= allowed
    assert ex.members[len(ok)].status == "refused"
    assert len(ex.members) == len(ok) + 1             # (the rest: not extracted)
    assert f"expands past {allowed} bytes" in ex.members[-1].message and "200 times its own size" in ex.stopped
    assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) == sum(m.size for m in ok)
    # the same bundle under the default limits (a floor of 1 GiB): all of it
    ex, _ = _extract_checked(tmp_path / "again", raw)
    assert ex.stopped is None and all(m.status == "ok" for m in ex.members) and len(ex.members) == 41


def test_member_limit_in_plain_tar_refuses_one_and_goes_on(tmp_path, bundles):
    src = tmp_path / "big.tar"
    make_tar(src, [("a.txt", b"a\n"), ("big.bin", b"x" * 50_000), ("small.txt", b"small\n")])
    limits = IntakeLimits(max_member_bytes=10_000)
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), limits)
    assert [(m.path, m.status) for m in ex.members] == [
        ("a.txt", "ok"), ("big.bin", "refused"), ("small.txt", "ok")]
    assert "per-file limit of 10000" in ex.members[1].message
    assert ex.stopped is None
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "small.txt"]


def test_member_limit_in_compressed_tar_stops(tmp_path, bundles):
    """In a compressed tar the stream must be decompressed to skip a member: stop."""
    src = tmp_path / "big.tar.gz"
    make_tar(src, [("a.txt", b"a\n"), ("big.bin", bytes(50_000)), ("small.txt", b"small\n")], "w:gz")
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), IntakeLimits(max_member_bytes=10_000))
    assert [(m.path, m.status) for m in ex.members] == [("a.txt", "ok"), ("big.bin", "refused")]
    assert ex.stopped is not None and "10000" in ex.stopped


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_max_members(tmp_path, bundles, kind):
    members = [(f"d/f{i}.txt", f"{i}\n".encode()) for i in range(5)]
    src = tmp_path / f"many.{kind}"
    (make_tar if kind == "tar" else make_zip)(src, members)
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), IntakeLimits(max_members=3))
    assert [m.path for m in ex.files] == ["d/f0.txt", "d/f1.txt", "d/f2.txt"]
    assert len(ex.members) == 3
    assert ex.stopped is not None and "more than 3 members" in ex.stopped
    assert sorted(p.name for p in (dest / "d").iterdir()) == ["f0.txt", "f1.txt", "f2.txt"]


def test_zip_bomb_member_refused_others_kept(tmp_path, bundles):
    src = tmp_path / "bomb.zip"
    make_zip(src, [("a.txt", b"a\n"), ("bomb.bin", bytes(8 * 1024 * 1024)), ("b.txt", b"b\n")])
    assert src.stat().st_size < 50_000
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), IntakeLimits(max_member_bytes=1_000_000))
    assert [(m.path, m.status) for m in ex.members] == [("a.txt", "ok"), ("bomb.bin", "refused"), ("b.txt", "ok")]
    assert "per-file limit of 1000000" in ex.members[1].message
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "b.txt"]


def test_zip_total_limit_stops(tmp_path, bundles):
    src = tmp_path / "bomb.zip"
    make_zip(src, [("a.txt", b"a\n"), ("z1.bin", bytes(600_000)), ("z2.bin", bytes(600_000)),
                   ("b.txt", b"b\n")])
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles), IntakeLimits(max_total_bytes=1_000_000))
    assert [(m.path, m.status) for m in ex.members] == [("a.txt", "ok"), ("z1.bin", "ok"), ("z2.bin", "refused")]
    assert ex.stopped is not None and "1000000" in ex.stopped
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "z1.bin"]


def test_store_stream_over_limit_leaves_nothing(tmp_path, bundles):
    bundles.mkdir()
    with pytest.raises(IntakeError, match="upload limit of 1000 bytes"):
        store_stream(io.BytesIO(b"x" * 5000), "big.bin", bundles, limit=1000)
    assert list(bundles.iterdir()) == []
    # exactly at the limit is accepted
    raw = store_stream(io.BytesIO(b"x" * 1000), "ok.bin", bundles, limit=1000)
    assert raw.bytes == 1000
    assert [p.name for p in bundles.iterdir()] == [f"{sha256(b'x' * 1000)}.bin"]


def test_store_stream_empty_upload(tmp_path, bundles):
    with pytest.raises(IntakeError, match="empty.log: the upload is empty"):
        store_stream(io.BytesIO(b""), "empty.log", bundles)
    assert list(bundles.iterdir()) == []


# ---------------------------------------------------------------------------
# damaged archives and unreadable inputs


def _incompressible(n: int, seed: int) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).hexdigest().encode() + b"\n"
        i += 1
    return bytes(out[:n])


def test_truncated_tar_gz_keeps_members_before_the_cut(tmp_path, bundles):
    members = [(f"m{i}.log", _incompressible(40_000, i)) for i in range(4)]
    full = tmp_path / "full.tar.gz"
    data = make_tar(full, members, "w:gz")
    src = tmp_path / "cut.tar.gz"
    src.write_bytes(data[: len(data) // 2])        # the cut lands inside m1 (or m2)
    raw = store_raw(src, bundles)
    assert (raw.kind, raw.compression) == ("tar", "gzip")
    ex, dest = _extract_checked(tmp_path, raw)
    assert ex.stopped is not None
    assert "damaged" in ex.stopped or "truncated" in ex.stopped
    ok = {m.path: m for m in ex.files}
    assert "m0.log" in ok and (dest / "m0.log").read_bytes() == members[0][1]
    assert "m3.log" not in ok
    for m in ex.files:      # whatever is reported ok is complete
        assert m.file.read_bytes() == dict(members)[m.path]
    # nothing half-written is left on disk
    assert sorted(p.name for p in dest.iterdir()) == sorted(ok)


def test_truncated_plain_tar_keeps_members_before_the_cut(tmp_path, bundles):
    members = [(f"m{i}.log", _incompressible(40_000, i)) for i in range(4)]
    full = tmp_path / "full.tar"
    data = make_tar(full, members)
    src = tmp_path / "cut.tar"
    src.write_bytes(data[: len(data) // 2])
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    ok = {m.path for m in ex.files}
    assert "m0.log" in ok and "m3.log" not in ok
    for m in ex.files:
        assert m.file.read_bytes() == dict(members)[m.path]
    assert sorted(p.name for p in dest.iterdir()) == sorted(ok)
    assert ex.stopped is not None or any(m.status == "refused" for m in ex.members)


def test_garbage_named_zip_is_a_single_file(tmp_path, bundles):
    src = tmp_path / "bundle.zip"
    src.write_bytes(b"\x13\x37 this is not a zip archive at all \xff\xfe" * 20)
    assert sniff_kind(src) == ("file", None)
    raw = store_raw(src, bundles)
    assert raw.kind == "file"
    ex, dest = _extract_checked(tmp_path, raw)
    assert [(m.path, m.status) for m in ex.members] == [("bundle.zip", "ok")]


def test_damaged_zip_with_magic_reports_instead_of_raising(tmp_path, bundles):
    src = tmp_path / "bundle.zip"
    src.write_bytes(b"PK\x03\x04" + b"\x00garbage" * 100)
    raw = store_raw(src, bundles)
    assert raw.kind == "zip"
    ex, dest = _extract_checked(tmp_path, raw)
    assert ex.members == []
    assert ex.stopped is not None and "cannot be opened" in ex.stopped


def test_zip_member_with_bad_crc_is_refused_others_kept(tmp_path, bundles):
    src = tmp_path / "crc.zip"
    make_zip(src, [("a.txt", b"A" * 5000), ("b.txt", b"b\n")], zipfile.ZIP_STORED)
    data = bytearray(src.read_bytes())
    i = data.index(b"A" * 5000)
    data[i + 2500] = ord("B")                       # flip one stored byte: CRC mismatch
    src.write_bytes(bytes(data))
    ex, dest = _extract_checked(tmp_path, store_raw(src, bundles))
    assert [(m.path, m.status) for m in ex.members] == [("a.txt", "refused"), ("b.txt", "ok")]
    assert ex.members[0].message.startswith("refused: the member is truncated or damaged")
    assert sorted(p.name for p in dest.iterdir()) == ["b.txt"]      # no half-written a.txt


def test_truncated_zip_reports_that_it_cannot_be_opened(tmp_path, bundles):
    data = make_zip(tmp_path / "full.zip", NESTED)
    src = tmp_path / "cut.zip"
    src.write_bytes(data[: len(data) // 2])
    raw = store_raw(src, bundles)
    assert raw.kind == "zip"
    ex, dest = _extract_checked(tmp_path, raw)
    assert ex.members == []
    assert ex.stopped is not None and ex.stopped.startswith("the archive cannot be opened")


@pytest.mark.parametrize("name,stored_as", [
    ("../../evil.log", "evil.log"),
    ("/etc/evil.log", "evil.log"),
    ("..", "bundle"),
    ("dmesg", "dmesg"),
])
def test_single_file_upload_name_cannot_escape(tmp_path, bundles, name, stored_as):
    raw = store_stream(io.BytesIO(b"[    1.000000] x\n"), name, bundles)
    assert raw.kind == "file"
    ex, dest = _extract_checked(tmp_path, raw)
    assert [(m.path, m.status) for m in ex.members] == [(stored_as, "ok")]
    assert [p.name for p in dest.iterdir()] == [stored_as]
    # a single file is not copied again: the incident's file is a second name of the stored one
    assert (dest / stored_as).samefile(raw.raw_path)
    shutil.rmtree(dest)                 # (removing the incident's files keeps the stored bundle)
    assert raw.raw_path.read_bytes() == b"[    1.000000] x\n"


def test_store_raw_missing_path(tmp_path, bundles):
    missing = tmp_path / "no" / "such.tar"
    with pytest.raises(IntakeError) as e:
        store_raw(missing, bundles)
    assert str(missing) in str(e.value)
    assert "no such file or directory" in str(e.value)


def test_store_raw_empty_directory(tmp_path, bundles):
    empty = tmp_path / "empty"
    (empty / "only" / "subdirs").mkdir(parents=True)
    with pytest.raises(IntakeError) as e:
        store_raw(empty, bundles)
    assert str(empty) in str(e.value)
    assert list(bundles.iterdir()) == []       # the temp tar was removed


def test_store_raw_empty_file(tmp_path, bundles):
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    with pytest.raises(IntakeError, match="empty.log"):
        store_raw(f, bundles)
    assert list(bundles.iterdir()) == []


def test_store_raw_fifo_is_not_a_regular_file(tmp_path, bundles):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(IntakeError, match="not a regular file"):
        store_raw(fifo, bundles)


def test_extract_empties_the_destination_first(tmp_path, bundles):
    src = tmp_path / "b.tar"
    make_tar(src, [("x.txt", b"x\n")])
    dest = tmp_path / "inc" / "files"
    dest.mkdir(parents=True)
    (dest / "stale.txt").write_bytes(b"old")
    extract(store_raw(src, bundles), dest)
    assert sorted(p.name for p in dest.iterdir()) == ["x.txt"]


def test_folder_packed_without_the_tar_tool_is_the_same_bundle(tmp_path, monkeypatch):
    import aftertrace.ingest.bundle as B
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("hello\n")
    (src / "top.log").write_text("x\n")
    (src / "link").symlink_to("/etc/passwd")
    one = B.store_raw(src, tmp_path / "b1")
    monkeypatch.setattr(B.shutil, "which", lambda name: None)
    two = B.store_raw(src, tmp_path / "b2")
    assert one.sha256 == two.sha256
    outs = []
    for raw, d in ((one, "x1"), (two, "x2")):
        ex = B.extract(raw, tmp_path / d)
        outs.append(sorted((m.path, m.status, m.size) for m in ex.members))
    assert outs[0] == outs[1]
    assert ("link", "refused", 0) in outs[0] and ("a/b/f.txt", "ok", 6) in outs[0]


def test_folder_packed_when_the_tar_tool_fails_midway_and_stored_again(tmp_path, monkeypatch):
    import aftertrace.ingest.bundle as B
    src = tmp_path / "src"
    for i in range(300):        # names enough to fill the pipe to a tool that stopped reading
        (src / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 7}" / f"{'n' * 230}{i}.log").write_text(f"{i}\n")
    one = B.store_raw(src, tmp_path / "b")
    false = shutil.which("false")
    monkeypatch.setattr(B.shutil, "which", lambda name: false)
    two = B.store_raw(src, tmp_path / "b2")     # tar exits at once: packed in Python instead
    again = B.store_raw(src, tmp_path / "b")    # the same tree: the stored tar is kept
    assert one.sha256 == two.sha256 == again.sha256 and again.raw_path == one.raw_path
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [f"{one.sha256}.tar"]   # no temporary left
    rows = [sorted((m.path, m.status, m.size) for m in B.extract(raw, tmp_path / d).members)
            for raw, d in ((one, "x1"), (two, "x2"))]
    assert rows[0] == rows[1] and len(rows[0]) == 300


# ---------------------------------------------------------------------------
# a folder read where it lies: its members without reading its tar back


def _walk_with_os_walk(src: Path):
    """The listing as os.walk gives it: what _walk must give, in the same order."""
    listing = hashlib.sha256()
    entries = []
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames.sort()
        links = sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))
        for fn in sorted(filenames) + links:
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, src).replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(full)
                entries.append(("L", rel, full, 0, target))
                listing.update(f"L\0{rel}\0{target}\n".encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
                entries.append(("F", rel, full, st.st_size, None))
                listing.update(f"F\0{rel}\0{st.st_size}\0{digest}\n".encode("utf-8", "surrogateescape"))
            else:
                entries.append(("S", rel, full, 0, None))
                listing.update(f"S\0{rel}\n".encode("utf-8", "surrogateescape"))
    return listing.hexdigest(), entries


def _odd_tree(root: Path, awkward_names: bool = True) -> Path:
    """Links in and out of the tree, links to folders, archiver noise, long names and link
    targets, a name that is not UTF-8, and (``awkward_names``) names a tar tool may read from a
    list as something else: a leading '-', a backslash."""
    files = [("top.log", b"[    1.000000] hello\n"), ("a/b/c/deep.log", b"deep\n"), ("a/x.log", b"x\n"),
             ("empty.txt", b""), ("B.log", b"B\n"), ("b.log", b"b\n"), ("a.log", b"a\n"),
             ("\u00e9t\u00e9.log", b"e\n"), ("nl\nname.log", b"n\n"), ("sub/-C", b"c\n"),
             ("L" * 120 + ".log", b"long\n"), ("/".join(["d" * 60] * 5) + "/long-path.log", b"p\n"),
             ("__MACOSX/._top.log", b"mac\n"), ("x/.DS_Store", b"ds\n"), ("Thumbs.db", b"t\n"),
             ("zz/big.bin", b"B" * 5000)]
    if awkward_names:
        files += [("-dash.log", b"-\n"), ("--remove-files", b"r\n"), ("back\\slash.log", b"\\\n")]
    _write_tree(root, files, 1_600_000_000)
    fd = os.open(os.fsencode(root / "a") + b"/bad\xff.log", os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"bad name\n")
    os.close(fd)
    (root / "in").symlink_to("top.log")
    (root / "out").symlink_to("/etc/passwd")
    (root / "esc").symlink_to("../../x")
    (root / "broken").symlink_to("nowhere")
    (root / "dirlink").symlink_to("a")
    (root / "a" / "up").symlink_to("../a")
    (root / "longlink").symlink_to("t" * 300)
    return root


def _rows(ex) -> list:
    return [(m.path, m.size, m.status, m.message, m.file) for m in ex.members] + [ex.stopped]


def test_walk_lists_a_folder_as_os_walk_does(tmp_path):
    import aftertrace.ingest.bundle as B
    src = _odd_tree(tmp_path / "src")
    os.mkfifo(src / "a" / "pipe")
    assert B._walk(src) == _walk_with_os_walk(src)
    assert B._walk(src / "a") == _walk_with_os_walk(src / "a")


@pytest.mark.parametrize("slow", [True, False], ids=["reads wait", "reads from memory"])
def test_folder_files_are_read_ahead_only_when_reads_wait_and_within_the_window(tmp_path, monkeypatch, slow):
    """The scan hashes as os.walk lists, whether the read-ahead thread runs or not; it runs only
    when the probes' reads were slow (here: made to look so, or not), asks for each file not yet
    read at most once, never more than FILES files or BYTES bytes (PER_FILE of a file) ahead of
    the loop, and has ended when the scan returns."""
    import aftertrace.ingest.bundle as B
    src = _odd_tree(tmp_path / "src")
    sizes = [0, 10, 700, 2500, 40]
    _write_tree(src, [(f"many/{i % 7}/f{i:03d}.log", bytes([65 + i % 26]) * sizes[i % 5]) for i in range(300)],
                1_600_000_000)
    os.mkfifo(src / "many" / "pipe")
    monkeypatch.setattr(B._ReadAhead, "PROBE", 4)
    monkeypatch.setattr(B._ReadAhead, "SLOW_PROBES", 2)
    monkeypatch.setattr(B._ReadAhead, "FILES", 8)
    monkeypatch.setattr(B._ReadAhead, "BYTES", 3000)
    monkeypatch.setattr(B._ReadAhead, "PER_FILE", 1000)
    monkeypatch.setattr(B._ReadAhead, "MEMORY_S", 0.0 if slow else 1.0)
    made = []
    init = B._ReadAhead.__init__

    def spy_init(self, files):
        init(self, files)
        made.append(self)
    monkeypatch.setattr(B._ReadAhead, "__init__", spy_init)
    asked = []
    real_open = os.open

    def spy_open(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        if threading.current_thread().name == "intake-read-ahead":
            asked.append((path, fd))
        return fd
    calls = []

    def spy_fadvise(fd, offset, length, advice):
        ra = made[-1]
        path = next(p for p, f in reversed(asked) if f == fd)
        i = [p for p, _ in ra.files].index(path)
        ahead = [min(sz, ra.PER_FILE) for _, sz in ra.files[ra.at:i + 1]]
        calls.append((i, ra.at, length, sum(ahead)))
    monkeypatch.setattr(B.os, "open", spy_open)
    monkeypatch.setattr(B.os, "posix_fadvise", spy_fadvise)
    hash_file = B._ReadAhead.sha256

    def slow_hash(self, path):      # (a loop as slow as reads from a disk: the thread keeps ahead)
        time.sleep(0.0005)
        return hash_file(self, path)
    monkeypatch.setattr(B._ReadAhead, "sha256", slow_hash)
    assert B._walk(src) == _walk_with_os_walk(src)
    ra = made[-1]
    assert not any(t.name == "intake-read-ahead" for t in threading.enumerate())
    if not slow:
        assert ra.thread is None and calls == []
        return
    assert ra.thread is not None and len(calls) > 100
    firsts = [i for i, *_ in calls]
    assert firsts == sorted(set(firsts))                    # each file asked for once, in order
    assert firsts[0] >= ra.PROBE * ra.SLOW_PROBES - 1        # (not before the probes said so)
    for i, at, length, ahead in calls:
        assert i < at + ra.FILES         # (a request can come after the loop read the file: harmless)
        assert length == min(ra.files[i][1], ra.PER_FILE)
        assert i == at or ahead <= ra.BYTES


@pytest.mark.parametrize("tool", [True, False])
@pytest.mark.parametrize("awkward", [True, False])
@pytest.mark.parametrize("limits", [IntakeLimits(), IntakeLimits(max_members=5), IntakeLimits(max_member_bytes=100),
                                    IntakeLimits(max_total_bytes=30)], ids=["default", "members", "member", "total"])
def test_folder_read_in_place_has_the_members_its_tar_reads_back(tmp_path, monkeypatch, tool, awkward, limits):
    import aftertrace.ingest.bundle as B
    src = _odd_tree(tmp_path / "src", awkward)
    if not tool:
        monkeypatch.setattr(B.shutil, "which", lambda name: None)
    raw = store_raw(src, tmp_path / "bundles")
    # a tar tool may read some names from its list otherwise: such a tar is read back
    kept = not (tool and awkward)
    assert (str(raw.raw_path) in B._PACKED) == kept
    first = extract(raw, tmp_path / "x1", limits, local_dir=src.resolve())
    assert str(raw.raw_path) not in B._PACKED
    again = extract(raw, tmp_path / "x2", limits, local_dir=src.resolve())    # from the tar
    assert _rows(first) == _rows(again)
    statuses = {m.status for m in first.members}
    assert statuses >= ({"ok", "refused"} if limits == IntakeLimits() else {"ok"})


@pytest.mark.parametrize("tool", [True, False])
def test_folder_with_a_fifo_or_hard_link_is_read_back_from_its_tar(tmp_path, monkeypatch, tool):
    import aftertrace.ingest.bundle as B
    if not tool:
        monkeypatch.setattr(B.shutil, "which", lambda name: None)
    fifo = _odd_tree(tmp_path / "fifo", awkward_names=False)
    os.mkfifo(fifo / "pipe")
    hard = _odd_tree(tmp_path / "hard", awkward_names=False)
    os.link(hard / "top.log", hard / "zz-again.log")
    for src, kept in ((fifo, False), (hard, not tool)):   # the tool stores a second name as a hard link
        raw = store_raw(src, tmp_path / "bundles")
        assert (str(raw.raw_path) in B._PACKED) == kept
        first = extract(raw, tmp_path / "x1", local_dir=src.resolve())
        again = extract(raw, tmp_path / "x2", local_dir=src.resolve())
        assert _rows(first) == _rows(again)
    m = by_path(first)
    assert m["zz-again.log"].status == ("alias" if tool else "ok")


def test_folder_tar_changed_since_packing_is_read_back(tmp_path, monkeypatch):
    import aftertrace.ingest.bundle as B
    src = _odd_tree(tmp_path / "src", awkward_names=False)
    raw = store_raw(src, tmp_path / "bundles")
    assert str(raw.raw_path) in B._PACKED
    os.utime(raw.raw_path, (1_000_000_000, 1_000_000_000))
    read = []
    real = B._extract_tar
    monkeypatch.setattr(B, "_extract_tar", lambda *a, **k: read.append(a[0]) or real(*a, **k))
    ex = extract(raw, tmp_path / "x", local_dir=src.resolve())
    assert read == [raw]
    assert by_path(ex)["top.log"].status == "ok"
