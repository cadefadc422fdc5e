"""Hostile bundles end to end: Service.submit_path + analyze on archives that try to escape the
incident folder, exhaust memory or disk, or confuse the pipeline, built from real files.

For every bundle: the analysis completes, every member gets its own row with a clear status and
a message, the good files are still analysed, nothing is written outside the incident's folder
and the raw store, and bombs are stopped by the decompressed-size limits (memory measured with
tracemalloc)."""
from __future__ import annotations

import os
import re
import stat
import tarfile
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

import hostile_corpus as hc
from hostile_corpus import LIMITS
from aftertrace.ingest.bundle import extract, store_raw
from aftertrace.server.service import Service

DMESG = hc.real("dmesg_raw")[1]
APPLOG = hc.real("app_log")[1]
NCCL = hc.real("nccl_log")[1]
LINE = DMESG.splitlines(keepends=True)[10]


def _escape_targets(tmp_path: Path) -> tuple[str, list[Path]]:
    """A unique name for members that try to escape, and where they would land: anywhere under
    the test's folder (the incident folder is inside it), beside it, or at the top of /tmp."""
    token = f"evil_{uuid.uuid4().hex[:8]}"
    return token, [tmp_path, tmp_path.parent, Path("/tmp")]


def _no_escapes(token: str, places: list[Path]) -> None:
    found = [p for p in places[0].rglob(f"{token}*")
             if not re.search(r"/incidents/[0-9a-f]{12}/", p.relative_to(places[0]).as_posix())]
    for place in places[1:]:
        found += list(place.glob(f"{token}*"))
    assert found == [], found


def _hostile_members(tmp_path: Path, token: str):
    """(name, data, type, link) of the hostile tar: every class of bad member next to good ones."""
    R, S, L = tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
    return [
        ("node-1/dmesg.txt", DMESG, R, ""),
        ("node-1/dmesg.txt", b"a second copy\n", R, ""),                       # duplicate name
        (f"../../{token}_dotdot", b"x", R, ""),                                  # ../
        (f"node-1/../../../{token}_deep_dotdot", b"x", R, ""),
        (f"{tmp_path}/{token}_absolute", b"x", R, ""),                           # absolute
        ("node-1/link_out", b"", S, "/etc/passwd"),                              # symlink out
        ("node-1/link_up", b"", S, "../../../../etc/shadow"),
        ("node-1/hard_out", b"", L, "../../etc/passwd"),                         # hard link out
        ("node-1/hard_abs", b"", L, "/etc/passwd"),
        ("node-1/link_in", b"", S, "dmesg.txt"),                                 # link inside
        ("node-1/link_out", b"x", R, ""),                                        # file named like the link
        ("node-1/dev_null", b"", tarfile.CHRTYPE, ""),                           # device files
        ("node-1/dev_sda", b"", tarfile.BLKTYPE, ""),
        ("node-1/fifo", b"", tarfile.FIFOTYPE, ""),                              # FIFO
        ("/".join(["d"] * 200) + "/deep.log", NCCL, R, ""),                      # deeply nested
        ("/".join(["x" * 200] * 24) + "/too_long.log", NCCL, R, ""),             # path longer than PATH_MAX
        ("node-2/" + "n" * 300 + ".log", NCCL, R, ""),                           # name longer than NAME_MAX
        ("node-2/empty.log", b"", R, ""),                                        # empty
        ("node-2/garbage.bin", os.urandom(4096), R, ""),                         # binary garbage
        ("node-2/utf16.log", hc.utf16(APPLOG, None), R, ""),                     # UTF-16
        ("node-2/latin1.log", DMESG.replace(b"python3", "pyth\u00f6n3".encode("latin-1")), R, ""),
        ("node-2/\udcff\udcfenot_utf8_name.log", DMESG, R, ""),                 # name not UTF-8
        ("node-2/\udcff\udcfdnot_utf8_name.log", DMESG, R, ""),                 # ... shown alike
        ("node-2/line\nbreak.log", DMESG, R, ""),                                # control chars in the name
        ("node-2/inner.tar.gz", hc.tar_bytes([("x/dmesg.txt", DMESG)], "w:gz"), R, ""),   # archive in archive
        ("node-2/inner.zip", hc.zip_bytes([("x/dmesg.txt", DMESG)]), R, ""),
        ("node-2/rank0.pt.trace.json", APPLOG, R, ""),                           # claims Kineto, is a log
        ("node-2/dmesg.txt", hc.real("kineto")[1], R, ""),                       # claims dmesg, is Kineto
        ("node-2/<script>alert(1)<\\script>.log", DMESG[:400], R, ""),
        ("__MACOSX/node-1/._dmesg.txt", b"\x00\x05\x16\x07", R, ""),             # archiver noise
        ("node-1/after.log", APPLOG, R, ""),                                     # after all of it
    ]


def _check_bundle(rep: dict, token: str) -> dict:
    src = hc.check_sources(rep)
    # the good files are analysed whatever surrounds them
    assert src["node-1/dmesg.txt"]["status"] == "parsed" and src["node-1/dmesg.txt"]["records"] > 100
    assert src["node-1/after.log"]["status"] == "parsed"
    by = lambda part: [s for p, s in src.items() if part in p]  # noqa: E731
    for s in by(token):
        assert s["status"] == "failed" and ("'..'" in s["error"] or "absolute path" in s["error"]), s
    assert len(by(token)) == 3
    # (a file of the same name as the refused link keeps the name; the link's row is the copy)
    for name in ("node-1/link_out (copy 2)", "node-1/link_up", "node-1/hard_out", "node-1/hard_abs"):
        assert src[name]["status"] == "failed" and "points outside the bundle" in src[name]["error"], src[name]
    assert "inside the bundle" in src["node-1/link_in"]["error"]
    assert src["node-1/link_out"]["status"] in ("unrecognized", "parsed", "text")
    assert src["node-1/dmesg.txt (copy 2)"]["error"] == "refused: duplicate member; the first copy is kept"
    for name, what in (("node-1/dev_null", "device file"), ("node-1/dev_sda", "device file"), ("node-1/fifo", "FIFO")):
        assert (src[name]["status"], src[name]["error"]) == ("failed", f"refused: {what}")
    deep = [s for p, s in src.items() if p.endswith("/deep.log")]
    assert len(deep) == 1 and deep[0]["status"] == "parsed"
    for s in [s for p, s in src.items() if p.endswith(("/too_long.log", ".log")) and ("xxxx" in p or "nnnn" in p)]:
        assert s["status"] == "failed" and s["error"] == "refused: File name too long", s
        assert str(Path.home()) not in s["error"] and "/incidents/" not in s["error"]
    assert src["node-2/empty.log"]["error"] == "empty file"
    assert "binary" in src["node-2/garbage.bin"]["error"]
    assert "UTF-16" in src["node-2/utf16.log"]["error"]
    assert src["node-2/latin1.log"]["status"] == "partial" and "not valid UTF-8" in src["node-2/latin1.log"]["error"]
    assert src["node-2/\\xff\\xfenot_utf8_name.log"]["status"] == "parsed"
    assert src["node-2/\\xff\\xfdnot_utf8_name.log"]["status"] == "parsed"
    assert src["node-2/line\nbreak.log"]["status"] == "parsed"
    for inner in ("node-2/inner.tar.gz", "node-2/inner.zip"):
        assert src[inner]["status"] == "unrecognized" and "binary" in src[inner]["error"]
    assert src["node-2/rank0.pt.trace.json"]["kind"] == "app_log"
    assert src["node-2/dmesg.txt"]["kind"] == "torch_trace"
    assert src["node-2/<script>alert(1)<\\script>.log"]["kind"] == "dmesg"
    return src


def test_hostile_tar(tmp_path, hsettings, confined):
    token, places = _escape_targets(tmp_path)
    path = tmp_path / "hostile.tar"
    path.write_bytes(hc.tar_bytes(_hostile_members(tmp_path, token)))
    rep = hc.analyse(Service(hsettings), path, limit_s=30)
    _check_bundle(rep, token)
    assert any(p.endswith("__MACOSX/node-1/._dmesg.txt") or "._dmesg" in p for p in
               (s["path"] for s in rep["sources"]))
    confined(hsettings.home, path)
    _no_escapes(token, places)


@pytest.mark.parametrize("mode", ["w:gz", "w:xz", "w:bz2"])
def test_hostile_compressed_tar(tmp_path, hsettings, confined, mode):
    token, places = _escape_targets(tmp_path)
    path = tmp_path / "hostile.tar.x"
    path.write_bytes(hc.tar_bytes(_hostile_members(tmp_path, token), mode))
    _check_bundle(hc.analyse(Service(hsettings), path), token)
    confined(hsettings.home, path)
    _no_escapes(token, places)


def test_hostile_zip(tmp_path, hsettings, confined):
    token, places = _escape_targets(tmp_path)
    members = [("node-1/dmesg.txt", DMESG), (f"../../{token}_dotdot", b"x"), (f"..\\..\\{token}_backslash", b"x"),
               (f"{tmp_path}/{token}_absolute", b"x"), (f"C:\\{token}_drive", b"x"),
               ("node-2/garbage.bin", os.urandom(2048)), ("node-2/empty.log", b""),
               ("/".join(["d"] * 150) + "/deep.log", NCCL), ("node-1/after.log", APPLOG)]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = hc.zip_bytes(members + [("node-1/dmesg.txt", b"second\n")],
                            symlinks=[("node-1/link_out", "/etc/passwd"), ("node-1/link_up", "../../../x"),
                                      ("node-1/link_in", "dmesg.txt")],
                            specials=[("node-1/fifo", stat.S_IFIFO), ("node-1/dev", stat.S_IFCHR)])
    path = tmp_path / "hostile.zip"
    path.write_bytes(data)
    src = hc.check_sources(hc.analyse(Service(hsettings), path))
    assert src["node-1/dmesg.txt"]["status"] == "parsed" and src["node-1/after.log"]["status"] == "parsed"
    escapes = [s for p, s in src.items() if token in p]
    assert len(escapes) == 4 and all(s["status"] == "failed" for s in escapes)
    assert "points outside the bundle" in src["node-1/link_out"]["error"]
    assert "points outside the bundle" in src["node-1/link_up"]["error"]
    assert src["node-1/fifo"]["error"] == "refused: special file" and src["node-1/dev"]["status"] == "failed"
    assert src["node-1/dmesg.txt (copy 2)"]["error"].startswith("refused: duplicate")
    confined(hsettings.home, path)
    _no_escapes(token, places)


def test_hostile_directory(tmp_path, hsettings, confined):
    """A folder given as it is: links out, hard links, a FIFO, non-UTF-8 names."""
    root = tmp_path / "bundle"
    (root / "node-1").mkdir(parents=True)
    (root / "node-1" / "dmesg.txt").write_bytes(DMESG)
    os.symlink("/etc/passwd", root / "node-1" / "link_out")
    os.symlink("../../../../", root / "node-1" / "dir_up")
    os.link(root / "node-1" / "dmesg.txt", root / "node-1" / "hard.txt")
    os.mkfifo(root / "node-1" / "fifo")
    with open(os.path.join(os.fsencode(root), b"node-1/\xff\xfe.log"), "wb") as f:
        f.write(APPLOG)
    src = hc.check_sources(hc.analyse(Service(hsettings), root))
    assert "points outside the bundle" in src["node-1/link_out"]["error"]
    assert "points outside the bundle" in src["node-1/dir_up"]["error"]
    assert src["node-1/fifo"]["status"] == "failed"
    assert src["node-1/\\xff\\xfe.log"]["status"] == "parsed"
    assert {src["node-1/dmesg.txt"]["status"], src["node-1/hard.txt"]["status"]} >= {"parsed"}
    confined(hsettings.home, root)


# -- bombs -------------------------------------------------------------------------------------

def _peak_mb(fn) -> tuple[object, float]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] / 1024**2
    finally:
        tracemalloc.stop()


def test_gzip_bomb_single_file(tmp_path, hsettings, confined):
    """1 GB of real dmesg lines in 3 MB of gzip: parsing stops at the per-file limit."""
    path = tmp_path / "dmesg.txt.gz"
    path.write_bytes(hc.gzip_bomb(LINE, 1024**3))
    assert path.stat().st_size < LIMITS.max_upload_bytes
    rep = hc.analyse(Service(hsettings), path, limit_s=30)
    (s,) = rep["sources"]
    assert s["status"] == "partial" and s["records"] > 1000
    assert f"decompressed data exceeds the per-file limit of {LIMITS.max_member_bytes} bytes" in s["error"]
    confined(hsettings.home, path)


def test_tar_gz_bomb_stops_at_the_total_limit_and_keeps_the_files_before(tmp_path, hsettings, confined):
    path = tmp_path / "bomb.tgz"
    path.write_bytes(hc.tar_gz_bomb(LINE, 1024**3, before=[("node-1/dmesg.txt", DMESG)],
                                    after=[("node-1/after.log", APPLOG)]))
    assert path.stat().st_size < 4 * 1024**2
    t0 = time.perf_counter()
    rep = hc.analyse(Service(hsettings), path)
    assert time.perf_counter() - t0 < 30
    src = hc.check_sources(rep)
    assert src["node-1/dmesg.txt"]["status"] == "parsed"
    bomb = src["node-1/bomb.log"]
    assert bomb["status"] == "failed" and "per-file limit" in bomb["error"]
    assert any("extraction stopped" in n for n in rep["notes"]), rep["notes"]
    # nothing of the bomb is left on disk
    inc = hsettings.incident_dir(rep["incident"]["id"])
    assert sum(f.stat().st_size for f in inc.rglob("*") if f.is_file()) < 4 * 1024**2
    confined(hsettings.home, path)


def test_zip_bomb_member_is_refused_and_the_others_kept(tmp_path, hsettings, confined):
    path = tmp_path / "bomb.zip"
    path.write_bytes(hc.zip_bomb(LINE, 128 * 1024**2, others=[("node-1/dmesg.txt", DMESG), ("node-1/after.log", APPLOG)]))
    assert path.stat().st_size < 1024**2
    src = hc.check_sources(hc.analyse(Service(hsettings), path))
    assert src["node-1/bomb.log"]["status"] == "failed" and "per-file limit" in src["node-1/bomb.log"]["error"]
    assert src["node-1/dmesg.txt"]["status"] == "parsed" and src["node-1/after.log"]["status"] == "parsed"
    confined(hsettings.home, path)


def test_zip_symlink_member_that_is_a_bomb_is_not_read_whole(tmp_path):
    """Regression: a zip 'symlink' whose target text is 100 MB was read into memory whole."""
    path = tmp_path / "linkbomb.zip"
    path.write_bytes(hc.zip_bomb(b"\0" * 4096, 100 * 1024**2, name="node-1/link", symlink=True,
                                 others=[("node-1/dmesg.txt", DMESG)]))
    raw = store_raw(path, tmp_path / "bundles")
    ex, peak = _peak_mb(lambda: extract(raw, tmp_path / "files", LIMITS))
    assert peak < 32, f"{peak:.0f} MB held while extracting"
    m = {x.path: x for x in ex.members}
    assert m["node-1/link"].status == "refused" and len(m["node-1/link"].message) < 1200
    assert m["node-1/dmesg.txt"].status == "ok"


def test_tar_long_name_bomb_is_refused_before_it_is_read(tmp_path):
    """Regression: a 100 MB GNU long name (a 100 KB tar.gz) was read into memory by tarfile."""
    path = tmp_path / "longname.tgz"
    path.write_bytes(hc.tar_long_name_bomb(100 * 1024**2))
    assert path.stat().st_size < 1024**2
    raw = store_raw(path, tmp_path / "bundles")
    ex, peak = _peak_mb(lambda: extract(raw, tmp_path / "files", LIMITS))
    assert peak < 32, f"{peak:.0f} MB held while extracting"
    assert "name/extended header declares 104857600 bytes" in ex.stopped
    assert all(len(m.path) < 70_000 for m in ex.members)


def test_tar_header_chain_does_not_crash_the_extraction(tmp_path, hsettings, confined):
    """Regression: 5000 chained GNU long-name headers raised RecursionError out of extract."""
    path = tmp_path / "chain.tgz"
    path.write_bytes(hc.tar_header_chain(5000, before=[("node-1/dmesg.txt", DMESG)]))
    rep = hc.analyse(Service(hsettings), path)
    src = hc.check_sources(rep)
    assert src["node-1/dmesg.txt"]["status"] == "parsed"
    assert any("too many chained extended headers" in n for n in rep["notes"]), rep["notes"]
    confined(hsettings.home, path)


def test_tar_header_chain_at_the_start(tmp_path):
    path = tmp_path / "chain_first.tgz"
    path.write_bytes(hc.tar_header_chain(5000))
    ex = extract(store_raw(path, tmp_path / "bundles"), tmp_path / "files", LIMITS)
    assert ex.members == [] and "cannot be opened" in ex.stopped


def test_many_members_stop_at_the_member_limit(tmp_path, hsettings, confined):
    path = tmp_path / "many.tar"
    path.write_bytes(hc.tar_bytes([(f"n/{i}.log", b"") for i in range(LIMITS.max_members + 50)]))
    rep = hc.analyse(Service(hsettings), path)
    assert any(f"more than {LIMITS.max_members} members" in n for n in rep["notes"])
    assert len(rep["sources"]) == LIMITS.max_members
    confined(hsettings.home, path)


# -- damaged archives --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["tar.gz", "tar.xz", "tar.bz2", "zip"])
@pytest.mark.parametrize("cut", [0.3, 0.7, 0.97])
def test_truncated_archive(tmp_path, hsettings, confined, kind, cut):
    members = [("node-1/dmesg.txt", DMESG), ("node-1/app.log", APPLOG), ("node-1/nccl.log", NCCL)]
    data = hc.zip_bytes(members) if kind == "zip" else hc.tar_bytes(members, "w:" + kind.split(".")[1])
    path = tmp_path / f"cut.{kind}"
    path.write_bytes(data[: int(len(data) * cut)])
    rep = hc.analyse(Service(hsettings), path)
    hc.check_sources(rep)
    if kind != "zip":
        assert rep["notes"] or rep["sources"], rep
    confined(hsettings.home, path)


def test_damaged_gzip_at_its_start_is_one_unreadable_file_not_a_crash(tmp_path, hsettings, confined):
    """Regression: a .tgz damaged in its first KB raised zlib.error out of the bundle sniffing."""
    data = bytearray(hc.tar_bytes([("node-1/dmesg.txt", DMESG)], "w:gz"))
    for i in range(12, 40):
        data[i] ^= 0xFF
    path = tmp_path / "damaged.tgz"
    path.write_bytes(bytes(data))
    rep = hc.analyse(Service(hsettings), path)
    (s,) = hc.check_sources(rep).values()
    assert s["status"] in ("failed", "unrecognized", "partial")
    assert s["error"]
    assert [p.name for p in hsettings.bundles_dir.iterdir() if p.name.startswith(".")] == []
    confined(hsettings.home, path)


def test_zip_with_a_name_flagged_utf8_that_is_not(tmp_path, hsettings, confined):
    """Regression: zipfile raised UnicodeDecodeError out of the extraction."""
    data = hc.zip_bytes([("node-1/\u00e9t\u00e9.log", DMESG), ("node-1/ok.log", DMESG)])
    data = data.replace("node-1/\u00e9t\u00e9.log".encode(), "node-1/\u00e9t\u00e9.log".encode()
                        .replace(b"\xc3\xa9", b"\xff\xfe", 1))
    path = tmp_path / "badname.zip"
    path.write_bytes(data)
    rep = hc.analyse(Service(hsettings), path)
    assert any("cannot be opened" in n for n in rep["notes"]), rep["notes"]
    confined(hsettings.home, path)
