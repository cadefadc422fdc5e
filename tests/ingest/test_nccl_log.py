"""NCCL debug logs: detection and exact events from real files (tests/data/nccl_log, PROVENANCE.md)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aftertrace.ingest.formats.logs.applog import AppLogParser
from aftertrace.ingest.formats.logs.nccl import NcclLogParser
from aftertrace.ingest.formats.logs.nccl_grammar import warn_class
from aftertrace.ingest.parse import ParseJob, SourceResult, parse_file
from aftertrace.ingest.reader import Head
from aftertrace.ingest.registry import default_registry

DATA = Path(__file__).resolve().parent.parent / "data"
NCCL = DATA / "nccl_log"


def parse(path: Path, tmp_path: Path, rel: str | None = None, zone: str = "UTC",
          parser: str | None = None) -> SourceResult:
    return parse_file(ParseJob(str(path), rel or path.name, str(tmp_path / "out"), time_zone=zone,
                               parser=parser))


def events(res: SourceResult) -> list[dict]:
    out = []
    for f in res.parts.get("events", []):
        out += pq.read_table(f).to_pylist()
    for e in out:
        e["attrs"] = json.loads(e["attrs"]) if e["attrs"] else {}
    return sorted(out, key=lambda e: e["line"])


def facts(res: SourceResult) -> list[dict]:
    out = []
    for f in res.parts.get("facts", []):
        out += pq.read_table(f).to_pylist()
    return out


def by_line(evs: list[dict]) -> dict[int, dict]:
    return {e["line"]: e for e in evs}


# Which parser claims each real file (first 64 KiB): NCCL-heavy logs are nccl_log; the short
# excerpt whose only NCCL line sits under a PyTorch RuntimeError, and the watchdog excerpts
# without NCCL lines, are app_log.
CLAIMS = {
    "bigscience__all_reduce_bench-32gb-n4.txt": "nccl_log",
    "bigscience__jz_broken_network_conn_refused.log": "app_log",
    "bigscience__n16_32gb_all_reduce_bench.txt.gz": "nccl_log",
    "bigscience__n1_32gb_all_reduce_bench.txt": "nccl_log",
    "issue_basicsr-737_watchdog_pg_guid_format.log": "app_log",
    "issue_llamafactory-6269_watchdog_reduce_scatter.log": "app_log",
    "issue_nvidia-nccl-1232_socketProgress_conn_closed.log": "nccl_log",
    "issue_nvidia-nccl-1609_nvls_h800_init.log": "nccl_log",
    "issue_nvidia-nccl-1672_ray_prefixed_repeated_nvls.log": "nccl_log",
    "issue_nvidia-nccl-697_ncclSystemError_socket_dgxa100.log": "nccl_log",
    "issue_nvidia-nccl-tests-166_socket_recv_failed_init.log": "nccl_log",
    "issue_ofa-271_watchdog_old_format_8xV100.log": "app_log",
    "issue_open-sora-plan-386_shm_channels_unhandled_cuda.log": "nccl_log",
    "issue_pytorch-130113_socket_init_start_3ranks.log": "nccl_log",
    "mlengineering__ib_completion_error12_azure.log": "nccl_log",
    "raddet__nccl_debug.log": "nccl_log",
    "timez-zx__nccl-tests_nccl.log.gz": "nccl_log",
}


@pytest.mark.parametrize("name,parser", sorted(CLAIMS.items()))
def test_real_logs_are_claimed_by_the_right_parser(name, parser):
    det = default_registry().detect(Head.read(NCCL / name, name))
    assert det.recognized and det.parser.name == parser


def test_every_data_file_is_in_the_claims_table():
    assert sorted(p.name for p in NCCL.iterdir() if p.name != "PROVENANCE.md") == sorted(CLAIMS)


@pytest.mark.parametrize("sub,name", [
    ("dmesg", "issue_reportportal-k8s-203_memcg_oom_raw.log"),
    ("dmesg", "gpud__pstore-erst_null-deref.txt"),
    ("negative", "flamegraph__perf-dd-stacks-01.txt"),
    ("negative", "hta__cpu_only_rank-34.pt.trace.json.gz"),
    ("negative", "netdata-12595_v1_cpu.stat"),
    ("negative", "kepler-159_v2_root_cpu.stat"),
    ("negative", "gpud__dmesg-iso_peermem.log"),
    ("host_info", "date"), ("host_info", "proc_stat"), ("host_info", "uname"), ("host_info", "anchors.txt"),
])
def test_log_detectors_do_not_claim_other_formats(sub, name):
    head = Head.read(DATA / sub / name, name)
    assert not NcclLogParser.detect(head)
    assert not AppLogParser.detect(head)


def test_socket_failure_during_init_line_by_line(tmp_path):
    res = parse(NCCL / "issue_nvidia-nccl-tests-166_socket_recv_failed_init.log", tmp_path)
    assert (res.kind, res.status, res.records, res.issues) == ("nccl_log", "parsed", 19, 0)
    assert (res.host, res.pid, res.clock_domain) == ("gpu004", 2200689, "none")   # no times in the file
    ev = by_line(events(res))
    assert sorted(ev) == [1, 2] + list(range(4, 17)) + list(range(18, 22))   # 3, 17: blank lines before WARNs
    w = ev[1]
    assert (w["host"], w["pid"], w["tid"], w["kind"], w["name"]) == ("gpu004", 2200689, 2200706, "nccl_warn",
                                                                      "nccl_warn")
    assert w["attrs"]["warn_class"] == "remote_closed"
    assert (w["attrs"]["dev"], w["attrs"]["src"], w["attrs"]["srcline"]) == (3, "misc/socket.cc", 49)
    assert w["ts_raw_ns"] is None and w["ts_interpolated"] is False
    assert ev[4]["attrs"]["warn_class"] == "socket" and ev[4]["kind"] == "nccl_warn"
    assert ev[18]["attrs"]["warn_class"] == "socket" and ev[18]["tid"] == 2200705
    # the first error chain of the process through init.cc or transport.cc (connecting the ranks,
    # here from init.cc:1079 below it) is the init failure; the rest are plain
    init = [e for e in ev.values() if e["kind"] == "nccl_init_failure"]
    assert [e["line"] for e in init] == [6]
    assert init[0]["attrs"]["nccl_result"] == "ncclInternalError"
    assert "could not connect the communicator's ranks" in init[0]["attrs"]["summary"]
    assert "transport.cc:148" in init[0]["attrs"]["summary"]
    assert ev[5]["name"] == "nccl_error_return" and ev[5]["kind"] is None
    assert ev[5]["attrs"]["err_code"] == 3
    assert ev[2]["attrs"]["nccl_result"] == "ncclRemoteError"


def test_init_start_lines_give_comm_rank_bus_and_the_pid_rank(tmp_path):
    res = parse(NCCL / "issue_pytorch-130113_socket_init_start_3ranks.log", tmp_path)
    ev = by_line(events(res))
    starts = {ln: e for ln, e in ev.items() if e["name"] == "nccl_comm_init"}
    assert sorted(starts) == [8, 9, 10]
    a = starts[9]["attrs"]
    assert (a["comm"], a["rank"], a["nranks"], a["cuda_dev"], a["nvml_dev"], a["bus_id"], a["comm_id"],
            a["phase"]) == ("0x823d3d0", 2, 3, 2, 2, "41000", "0xb5fe2776bc06e6f7", "START")
    # every line of a pid gets the rank of its communicator, also lines before the init line
    assert [(ev[ln]["pid"], ev[ln]["rank"]) for ln in (1, 2, 3, 11, 12, 13)] == [
        (3054646, 1), (3054645, 0), (3054647, 2), (3054647, 2), (3054645, 0), (3054646, 1)]
    assert ev[1]["name"] == "nccl_net" and ev[1]["attrs"]["net"] == "Socket"
    assert ev[4]["name"] == "nccl_network" and ev[4]["attrs"]["network"] == "Socket"
    comms = [json.loads(f["value"]) for f in facts(res) if f["key"] == "nccl_comm"]
    assert sorted((c["rank"], c["bus_id"], c["pid"]) for c in comms) == [
        (0, "1000", 3054645), (1, "23000", 3054646), (2, "41000", 3054647)]


def test_spliced_lines_of_two_processes_keep_the_last_complete_header(tmp_path):
    # raddet: two processes wrote one NCCL_DEBUG_FILE; line 15 ends with rank 1's Init COMPLETE
    res = parse(NCCL / "raddet__nccl_debug.log", tmp_path)
    ev = by_line(events(res))
    e15, e17 = ev[15], ev[17]
    assert (e15["name"], e15["host"], e15["pid"], e15["tid"], e15["rank"]) == (
        "nccl_comm_init", "ljm", 803564, 803604, 1)
    assert e15["attrs"]["spliced"] == 1 and e15["attrs"]["comm"] == "0x9497920"
    assert (e15["attrs"]["bus_id"], e15["attrs"]["phase"]) == ("3000", "COMPLETE")
    assert (e17["pid"], e17["rank"], e17["attrs"]["bus_id"], e17["attrs"]["phase"]) == (803563, 0, "2000",
                                                                                         "COMPLETE")
    # line 8 holds fragments of both processes; its last complete header is rank 1's Trees line
    assert (ev[8]["name"], ev[8]["pid"], ev[8]["attrs"]["spliced"]) == ("nccl_trees", 803564, 3)
    assert ev[1]["name"] == "nccl_cuda_driver" and ev[1]["attrs"]["cuda_driver"] == 12020
    # the topology lines of rank 1's process (P2P Chunksize, two channel connections, threadThresholds)
    # are one summary event on the last of them
    topo = ev[14]
    assert (topo["name"], topo["pid"], topo["rank"], topo["kind"]) == ("nccl_topology", 803564, 1, None)
    a = topo["attrs"]
    assert (a["collapsed"], a["lines"], a["first_line"], a["last_line"]) == ("topo", 4, 9, 14)
    assert (a["transports"], a["channels"]) == (["SHM/direct/direct"], 2)
    assert not {9, 10, 11} & set(ev)
    assert 16 not in ev          # the tail fragment " p2p channels, ..." is not a line of any grammar
    assert res.host == "ljm" and res.records == 13


def test_ray_prefix_and_repeat_suffix(tmp_path):
    res = parse(NCCL / "issue_nvidia-nccl-1672_ray_prefixed_repeated_nvls.log", tmp_path)
    ev = by_line(events(res))
    e = ev[1]
    assert (e["name"], e["host"], e["pid"], e["tid"], e["rank"]) == ("nccl_comm_init", "degamts15", 3569864,
                                                                      3571330, 3)
    assert (e["attrs"]["api"], e["attrs"]["nranks"], e["attrs"]["bus_id"], e["attrs"]["repeated"]) == (
        "ncclCommInitRank", 8, "64000", 15)
    assert ev[6]["name"] == "nccl_comm_topology" and ev[6]["attrs"]["nnodes"] == 1
    assert ev[7]["attrs"]["phase"] == "COMPLETE" and ev[7]["attrs"]["repeated"] == 8


def test_python_error_and_socket_warn_in_one_excerpt(tmp_path):
    res = parse(NCCL / "bigscience__jz_broken_network_conn_refused.log", tmp_path)
    ev = by_line(events(res))
    assert res.kind == "app_log" and sorted(ev) == [2, 4]
    e = ev[2]
    assert (e["kind"], e["attrs"]["exc"], e["attrs"]["nccl_error"], e["attrs"]["nccl_version"]) == (
        "python_exception", "RuntimeError", "unhandled system error", "2.7.8")
    w = ev[4]
    assert (w["kind"], w["host"], w["pid"], w["tid"], w["attrs"]["warn_class"]) == (
        "nccl_warn", "r11i6n2", 486514, 486651, "socket")


def test_ib_completion_error_is_a_network_warn(tmp_path):
    res = parse(NCCL / "mlengineering__ib_completion_error12_azure.log", tmp_path)
    ev = by_line(events(res))
    assert ev[1]["attrs"]["warn_class"] == "network_ib" and ev[1]["kind"] == "nccl_warn"
    assert ev[3]["attrs"]["err_src"] == "transport/net.cc" and ev[3]["attrs"]["nccl_result"] == "ncclRemoteError"
    assert ev[5]["attrs"]["err_thread"] == "Proxy Thread"
    assert res.attrs["other_lines"] == 1      # "0, vendor err 129 (Recv)" (the doc wrapped the WARN)


def test_nccl_tests_log_version_and_coll_lines_are_summarised(tmp_path):
    res = parse(NCCL / "timez-zx__nccl-tests_nccl.log.gz", tmp_path)
    assert res.kind == "nccl_log" and res.status == "parsed"
    assert res.attrs["nccl_versions"] == ["2.27.7+cuda13.0"]
    raw = gzip.decompress((NCCL / "timez-zx__nccl-tests_nccl.log.gz").read_bytes()).decode().splitlines()
    coll = [i for i, ln in enumerate(raw, 1) if " NCCL INFO " in ln and " opCount " in ln]
    assert res.attrs["nccl_coll_lines"] == len(coll)
    ev = events(res)
    kept = [e for e in ev if e["name"] == "nccl_coll"]
    # one COLL line per (host, pid, tid, cudaDev) is kept: the last one
    assert {e["line"] for e in kept} <= set(coll) and max(e["line"] for e in kept) == coll[-1]
    assert all(e["host"] == "mew0" and e["pid"] == 64904 for e in ev if e["category"] == "nccl")
    assert {"nccl_version", "nccl_comm_init", "nccl_bootstrap"} <= {e["name"] for e in ev}
    # one process drives both GPUs: ranks are told apart by the cudaDev of each line
    ln = {e["line"]: e for e in ev}
    assert [(ln[i]["attrs"]["cuda_dev"], ln[i]["rank"]) for i in (25, 26)] == [(0, 0), (1, 1)]
    # per-operation lines: one nccl_op event per (process, cudaDev), the last one, counting the rest
    per_op = (" Bytes -> Algo ", "opId=", "ncclPollProxyResponse", "Received and initiated operation")
    ops = {0: [], 1: []}
    for i, t in enumerate(raw, 1):
        if " NCCL INFO " in t and " opCount " not in t and any(p in t for p in per_op):
            ops[int(t.split("[", 1)[1].split("]", 1)[0])].append(i)
    got = {e["attrs"]["dev"]: e for e in ev if e["name"] == "nccl_op"}
    assert sorted(got) == [0, 1]
    for dev, lines in ops.items():
        a = got[dev]["attrs"]
        assert (got[dev]["line"], a["lines"], a["first_line"], a["last_line"]) == (lines[-1], len(lines), lines[0],
                                                                                  lines[-1])
        assert got[dev]["rank"] == dev
    # no line is lost: every NCCL line read is an event or counted by one
    nccl = [e for e in ev if e["category"] == "nccl"]
    assert sum(e["attrs"].get("lines", 1) for e in nccl) == res.attrs["line_families"]["nccl"]
    assert res.attrs["line_families"]["nccl"] == sum(1 for t in raw if " NCCL " in t)
    assert len(nccl) < 60 < len(raw) // 50


def test_nccl_226_time_prefix_and_230_func_variants(tmp_path):
    # No real 2.26+ file with its timestamp prefix is in tests/data: the first line is the example
    # of NCCL's own docs (docs/userguide/source/troubleshooting/logging.rst, FORMATS.md §3.1); the
    # others follow debug.cc's format strings (WARN with (func), fractional %6f, TRACE ms).
    p = tmp_path / "nccl.node-01.189884.log"
    p.write_text(
        "[2026-05-05 06:16:47] node-01:189884:189884 [3] plugin/net.cc:334 NCCL WARN Failed to initialize any "
        "NET plugin\n"
        "node-01:189884:189884 [3] NCCL INFO comm 0x55d1 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 1b000 "
        "commId 0xabc - Init START\n"
        "[2026-05-05 06:16:49.250000] node-01:189884:189890 [3] transport/net_ib.cc:1296 (ncclIbTest) NCCL WARN "
        "NET/IB : Got completion from peer 10.2.0.5<33092> with error 12\n"
        "node-01:189884:189890 [3] 2012.345678 ncclProxyProgress:812 NCCL TRACE progress\n",
        encoding="utf-8")
    res = parse(p, tmp_path, zone="Europe/Berlin")
    assert res.kind == "nccl_log" and res.clock_domain == "wall"
    ev = by_line(events(res))
    # 06:16:47 in Berlin (CEST, +02:00) = 04:16:47 UTC
    assert ev[1]["ts_raw_ns"] == 1777954607 * 10**9 and ev[1]["ts_interpolated"] is False
    assert ev[1]["attrs"]["warn_class"] == "plugin" and ev[1]["attrs"]["ts_resolution_ns"] == 10**9
    assert ev[3]["ts_raw_ns"] == 1777954609_250000000 and ev[3]["attrs"]["func"] == "ncclIbTest"
    assert ev[3]["attrs"]["ts_resolution_ns"] == 1000
    # the untimed INIT line sits between its neighbours: [47 s, 49.250001 s)
    e2 = ev[2]
    assert e2["ts_interpolated"] is True and e2["rank"] == 3
    assert (e2["attrs"]["ts_lo_ns"], e2["attrs"]["ts_hi_ns"]) == (1777954607 * 10**9, 1777954609_250001000)
    assert e2["ts_raw_ns"] == (1777954607 * 10**9 + 1777954609_250001000) // 2
    assert e2["attrs"]["ts_uncertainty_ns"] == (1777954609_250001000 - 1777954607 * 10**9) // 2
    assert ev[4]["name"] == "nccl_trace" and ev[4]["attrs"]["trace_ms"] == 2012.345678
    assert ev[4]["attrs"]["ts_bound"] == "after"


def test_warn_classes_table():
    assert warn_class("socketProgress: Connection closed by remote peer x<1>") == "remote_closed"
    assert warn_class("Call to bind failed: Address already in use") == "socket"
    assert warn_class("Cuda failure 'out of memory'") == "memory"
    assert warn_class("something odd") == "other"


def test_garbage_and_undecodable_lines_are_counted_and_skipped(tmp_path):
    good = (NCCL / "issue_nvidia-nccl-tests-166_socket_recv_failed_init.log").read_bytes()
    p = tmp_path / "mixed.log"
    p.write_bytes(good[:400] + b"\x00\x01\x02binary\x00junk\n\xff\xfe bad utf8 NCCL\n" + good[400:])
    # a NUL in the head makes the registry call the file binary; the parser itself must survive it
    res = parse(p, tmp_path, parser="nccl_log")
    assert res.status == "partial" and res.issues == 2
    assert res.attrs["garbage_lines"] == 1
    assert sum(1 for e in events(res) if e["kind"] == "nccl_warn") == 3


def _per_op_log(n: int) -> str:
    """A synthetic NCCL INFO log in the format of the real ones above: one init, n collectives on
    each of two GPUs of one process (COLL, tuning and proxy lines), then a WARN."""
    out = []
    for dev in (0, 1):
        out += [f"host-a:100:10{dev} [{dev}] NCCL INFO comm 0x{dev + 1} rank {dev} nranks 2 cudaDev {dev} "
                f"busId {dev + 1}000 - Init START",
                f"host-a:100:10{dev} [{dev}] NCCL INFO Channel 00/02 :    0   1",
                f"host-a:100:10{dev} [{dev}] NCCL INFO Channel 00/0 : {dev}[{dev}] -> {1 - dev}[{1 - dev}] via P2P/IPC",
                f"host-a:100:10{dev} [{dev}] NCCL INFO Channel 01/0 : {dev}[{dev}] -> {1 - dev}[{1 - dev}] "
                f"[send] via NET/IB/0",
                f"host-a:100:10{dev} [{dev}] NCCL INFO comm 0x{dev + 1} rank {dev} nranks 2 cudaDev {dev} "
                f"busId {dev + 1}000 - Init COMPLETE"]
    for i in range(n):
        for dev in (0, 1):
            out += [f"host-a:100:10{dev} [{dev}] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 recvbuff 0x7f00 "
                    f"count 2 datatype 7 op 0 root 0 comm 0x{dev + 1} [nranks=2] stream 0x55",
                    f"host-a:100:10{dev} [{dev}] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{{Lo..Hi}}"
                    f"={{0..0}}",
                    f"host-a:100:12{dev} [{dev}] NCCL INFO proxyProgressAsync opId=0x{i:x} op.type=1 op.reqBuff=0x0"
                    f" op.respSize=16 done=1"]
    out.append("host-a:100:120 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
               "10.2.0.5<33092> with error 12")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("chunk", [None, 4096])
def test_per_operation_lines_collapse_to_the_last_one_per_process_and_device(tmp_path, monkeypatch, chunk):
    import aftertrace.ingest.lines as lines_mod
    if chunk:       # small chunks: the kept lines travel over many chunk ends (their counts with them)
        monkeypatch.setattr(lines_mod, "CHUNK_BYTES", chunk)
    p = tmp_path / "nccl.log"
    p.write_text(_per_op_log(200))
    res = parse(p, tmp_path)
    ev = events(res)
    assert res.kind == "nccl_log" and res.status == "parsed"
    n0 = 10      # lines before the collectives
    last = n0 + 200 * 6
    assert [(e["line"], e["name"]) for e in ev] == [
        (1, "nccl_comm_init"), (4, "nccl_topology"), (5, "nccl_comm_init"), (6, "nccl_comm_init"),
        (9, "nccl_topology"), (10, "nccl_comm_init"), (last - 5, "nccl_coll"), (last - 3, "nccl_op"),
        (last - 2, "nccl_coll"), (last, "nccl_op"), (last + 1, "nccl_warn")]
    by = {(e["name"], e["attrs"]["dev"]): e for e in ev}
    assert sorted(by) == [("nccl_coll", 0), ("nccl_coll", 1), ("nccl_comm_init", 0), ("nccl_comm_init", 1),
                          ("nccl_op", 0), ("nccl_op", 1), ("nccl_topology", 0), ("nccl_topology", 1),
                          ("nccl_warn", 0)]
    # the last collective of each GPU, with its fields, and how many there were
    c0, c1 = by["nccl_coll", 0], by["nccl_coll", 1]
    assert (c0["line"], c0["attrs"]["op_count"], c0["attrs"]["lines"], c0["attrs"]["first_line"]) == (
        last - 5, "c7", 200, n0 + 1)
    assert (c1["line"], c1["attrs"]["lines"], c1["rank"], c1["pid"]) == (last - 2, 200, 1, 100)
    # tuning + proxy lines (two threads of the process): one event per GPU, the last line
    o0, o1 = by["nccl_op", 0], by["nccl_op", 1]
    assert (o0["line"], o0["attrs"]["lines"], o0["attrs"]["first_line"], o0["attrs"]["collapsed"]) == (
        last - 3, 400, n0 + 2, "op")
    assert (o1["line"], o1["attrs"]["lines"], o1["tid"], o1["rank"]) == (last, 400, 121, 1)
    assert o1["text"].startswith("host-a:100:121 [1] NCCL INFO proxyProgressAsync opId=0xc7 ")
    # topology: ring + two connections per GPU
    t0 = by["nccl_topology", 0]["attrs"]
    assert (t0["lines"], t0["first_line"], t0["last_line"], t0["transports"], t0["channels"]) == (
        3, 2, 4, ["NET/IB/0", "P2P/IPC"], 2)
    # meaningful lines are untouched
    w = by["nccl_warn", 0]
    assert (w["line"], w["kind"], w["attrs"]["warn_class"], w["tid"]) == (last + 1, "nccl_warn", "network_ib", 120)
    assert [e["attrs"]["phase"] for e in ev if e["name"] == "nccl_comm_init"] == ["START", "COMPLETE"] * 2
    assert res.attrs["nccl_coll_lines"] == 400 and res.attrs["line_families"]["nccl"] == last + 1
    assert sum(e["attrs"].get("lines", 1) for e in ev) == last + 1


_INFO_PIECES = ["NCCL version", "Init timings", "Connected all ", "NET/", "Using network ", "Bootstrap",
                "cudaDriverVersion", "comm ", "[Rank ", "] comm ", " comm 0x", "comm 0x", " coll channels", ":", " -> ",
                "0", "12", "a", "b_c", ".", "/", "-", " ", "x.cc", " opCount ", "opId=", "ncclPollProxyResponse",
                " Bytes -> Algo ", "Received and initiated operation", " NCCL ", "NCCL INFO ", "Channel ", " via ",
                "\u00fc", "\u0663"]


def test_compiled_info_reader_equals_the_collapse_grammar():
    # ingest.native.nccl_info classes NCCL INFO lines as collapse_info's regexes do (kept, spliced,
    # class 0/1/2 by literals) and numbers equal headers alike, on generated lines (hypothesis);
    # lines that are not ASCII are left to the regexes
    import polars as pl
    import pyarrow as pa
    from hypothesis import HealthCheck, given, settings, strategies as st
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs.nccl_grammar import INFO_KEEP, OP_LITERALS

    heads = st.sampled_from(["h:1:2 [0]", "h:1:3 [0]", "[2026-01-01 00:00:00] h:1:2 [0]", "", "x", "h\u00fc:1:2"])
    msgs = st.lists(st.sampled_from(_INFO_PIECES), max_size=10).map("".join)

    def same(lines):
        r = native.nccl_info(pa.array(lines, pa.large_string()))
        df = pl.DataFrame({"b": lines}).select(pl.col("b").str.splitn(" NCCL INFO ", 2).alias("s")).unnest("s")
        k, m = pl.col("field_0"), pl.col("field_1")
        want = df.select(
            pl.when(m.is_null() | m.str.contains(INFO_KEEP) | m.str.contains(" NCCL ", literal=True)).then(0)
            .when(m.str.contains(" opCount ", literal=True)).then(1)
            .when(m.str.contains_any(list(OP_LITERALS))).then(2).otherwise(3).alias("c"), k).rows()
        code, kid = r.code.to_pylist(), r.kid.to_pylist()
        for ln, c, (wc, wk) in zip(lines, code, want):
            if " NCCL INFO " in ln and not ln.isascii():
                assert c == native.UNSURE, ln
            else:
                assert c == wc, ln
        # the flags: the header starts with "[", the message with "Channel " (the topology lines
        # whose channel numbers and transports are counted)
        for ln, c, f, (_wc, wk) in zip(lines, code, r.flags.to_pylist(), want):
            if c in (1, 2, 3):
                msg = ln.split(" NCCL INFO ", 1)[1]
                assert bool(f & native.INFO_BRACKET) == (wk.startswith("[") and wk != ""), ln
                assert bool(f & native.INFO_CHANNEL) == msg.startswith("Channel "), ln
        seen = {}
        for c, i, (_wc, wk) in zip(code, kid, want):
            if c in (1, 2, 3):
                assert seen.setdefault(i, wk) == wk       # one number, one header
        assert len(set(seen.values())) == len(seen)       # one header, one number

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(heads, msgs, st.booleans()), min_size=1, max_size=10))
    def check(rows):
        same([f"{h} NCCL INFO {m}" if info else f"{h} {m}" for h, m, info in rows])

    # each alternative of INFO_KEEP and each class, at its edges
    same([f"h:1:2 [0] NCCL INFO {m}" for m in (
        "0 coll channels, 0 nvls channels", "12 coll channels", "x coll channels", "[Rank 3] comm 0x1 rank 3",
        "[Rank ] comm 0x1", "a comm 0x1", " comm 0x1", "comm 0x1 rank 0", "x.cc:12 -> 3", "x.cc:12 -> x", "x.cc: -> 3",
        ":12 -> 3", "a/b-c.d:1 -> 0 [Proxy]", "Channel 00/02 : 0 1", "AllReduce: opCount 1 sendbuff", "x opId=3",
        "NCCL version 2.18", "NET/IB : x", "Using network Socket", "Bootstrap : Using eth0", "cudaDriverVersion 12",
        "Init timings: rank 0", "Connected all rings", "Connected all", "spliced h:3:4 [1] NCCL INFO x", "")])
    check()


_HEAD_PIECES = ["h", "host-1.x", "a_b", ":", "1", "23", " ", "  ", "[", "]", "[3]", "[[0]]", "[]", "12.5", "a.cc:3",
                "(f)", " NCCL ", "NCCL ", "INFO", "WARN", "TRACE", "CALL", "ABORT", "INFOS", "x", "\u00fc", "\u0663", "\t"]


def test_compiled_header_reader_cuts_the_lines_as_the_string_operations_do():
    # nccl_frame reads the header of a line that starts with it ("host:pid:tid ") with the compiled
    # reader (ingest.native.nccl_heads, via _heads_read) on ASCII lines: the same frame as the string
    # operations (_heads_cut) on generated lines (hypothesis); the lines that are not ASCII are left
    # to the string operations, and the lines of another shape to the header search
    import polars as pl
    from hypothesis import HealthCheck, given, settings, strategies as st
    from polars.testing import assert_frame_equal
    from aftertrace.ingest import native
    from aftertrace.ingest.formats.logs.nccl_grammar import FAST_START, _heads_cut, _heads_read

    ids = st.sampled_from(["h:1:2", "host-1.x:12:345", "a_b.c:0:0", "h:1:", ":1:2", "h:x:2", "h\u00fc:1:2", "h:1:2:3"])
    rest = st.lists(st.sampled_from(_HEAD_PIECES), max_size=12).map("".join)

    def same(lines):
        cand = pl.DataFrame({"lineno": list(range(1, len(lines) + 1)), "body": lines},
                            schema={"lineno": pl.Int64, "body": pl.String})
        body = native.texts(cand["body"])
        h = native.nccl_heads(body)
        code = pl.Series(h.code)
        shaped = cand["body"].str.contains(FAST_START)
        for ln, c, f in zip(lines, code.to_list(), shaped.to_list()):
            if not ln.isascii():
                assert c == native.UNSURE, ln
            else:
                assert c == int(f), ln          # the shape FAST_START states
        read = code == 1
        if read.any():
            assert_frame_equal(_heads_read(cand, body, h, read), _heads_cut(cand.filter(read)))

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(ids, rest), min_size=1, max_size=10))
    def check(rows):
        same([f"{i}{r}" for i, r in rows])

    same(["h:1:2 [0] NCCL INFO Channel 00/02 : 0 1", "h:1:2 NCCL WARN x", "h:1:2 12.5 a.cc:3 (f) NCCL TRACE y",
          "h:1:2 [] NCCL INFO", "h:1:2  NCCL INFO z", "h:1:2 xNCCL INFO", "h:1:2 [0] NCCL INFO", "h:1:2 [0 1] NCCL CALL",
          "h:1:2 [[3]] NCCL ABORT q", "h:1:2 NCCL INFOS w", "h:1:2 NCCL  INFO", "h:1:2 [0] NCCL INFO a NCCL WARN b"])
    check()


@pytest.mark.parametrize("variant", ["as written", "not ascii", "after a floor"])
def test_info_grammar_read_once_per_message_and_collapse_on_real_lines(tmp_path, variant):
    # _nccl_events reads each distinct INFO message once and gives its fields to every row with it;
    # collapse_info groups the repetitive INFO lines per (class, header) (the compiled reader and
    # grouping; the regexes for lines that are not ASCII). Both checked against plain per-row
    # computations on real logs repeated three times: as written, with some headers and messages
    # made not ASCII, and with the lines up to a floor (the previous chunk's context) left alone.
    import json
    import re

    import polars as pl
    from aftertrace.ingest.formats.logs import engine as applog, nccl_grammar as nccl
    from aftertrace.ingest.lines import line_frames
    import gzip
    with gzip.open(NCCL / "timez-zx__nccl-tests_nccl.log.gz", "rb") as f:     # (COLL, tuning, proxy lines)
        text = b"".join(f.readline() for _ in range(6000))
    text += (NCCL / "bigscience__all_reduce_bench-32gb-n4.txt").read_bytes()    # (16 processes' topology)
    text = text * 3
    if variant == "not ascii":
        lines = text.split(b"\n")
        for i in range(0, len(lines), 7):
            lines[i] = lines[i].replace(b":", "\u00e9:".encode(), 1)              # a host
        for i in range(3, len(lines), 11):
            lines[i] = lines[i].replace(b" NCCL INFO ", " NCCL INFO \u00fc".encode(), 1)    # a message
        text = b"\n".join(lines)
    df = next(line_frames(__import__("io").BytesIO(text)))
    base = applog._wrap(df.select("lineno", "line"))
    floor = int(base["lineno"][base.height // 3]) if variant == "after a floor" else None
    pending: dict = {}
    out, mask = nccl.collapse_info(base, pending, floor)
    # reference: the same groups by Python
    groups: dict = {}
    for i, (ln, body) in enumerate(base.select("lineno", "body").iter_rows()):
        if " NCCL INFO " not in body:
            continue
        if floor is not None and ln <= floor:
            assert out.filter(pl.col("lineno") == ln)["_cls"].to_list() == [None]
            continue
        k, m = body.split(" NCCL INFO ", 1)
        if re.match(nccl.INFO_KEEP, m) or " NCCL " in m:
            continue
        cls = "coll" if " opCount " in m else "op" if any(x in m for x in nccl.OP_LITERALS) else "topo"
        assert out.filter(pl.col("lineno") == ln)["_cls"].to_list() in ([], [cls])
        if not k.startswith("["):
            groups.setdefault((cls, k), []).append(ln)
    kept = set(out["lineno"].to_list())
    for lns in groups.values():
        assert lns[0] in kept and lns[-1] in kept and not kept & set(lns[1:-1])
        if len(lns) > 2:
            assert pending[lns[-1]]["n"] == len(lns) - 2
    assert sum(p["n"] for p in pending.values()) == sum(max(0, len(v) - 2) for v in groups.values())
    if variant != "as written":
        assert len(pending) > 20
        return
    # grammar: each row's name and fields as its own regex gives them
    fams = applog._families(out, applog._State(zone="UTC", mtime_year=2026))
    ev = pl.concat([f for f in fams if f["category"][0] == "nccl"], how="diagonal_relaxed")
    seen = 0
    for msg, name, attrs in ev.select("msg", "name", "attrs").iter_rows():
        entry = next((e for e in nccl.INFO_GRAMMAR if e.literal in (msg or "")), None)
        if entry is None or name in ("nccl_warn", "nccl_trace", "nccl_call"):
            continue
        g = re.search(entry[2], msg)
        if g and any(v is not None for v in g.groupdict().values()):
            a = json.loads(attrs)
            assert name == entry[0]
            assert all(a[k] == (int(v) if k in entry[3] else v) for k, v in g.groupdict().items() if v is not None)
            seen += 1
    assert seen > 20 and len(pending) > 20 and set(out["_cls"].drop_nulls()) == {"coll", "op", "topo"}


def test_the_messages_read_once_per_file_are_bounded_and_read_alike(tmp_path, monkeypatch):
    # each distinct NCCL message's INFO entry is read once per file and kept (engine._info_read);
    # past MAX_INFO_READ messages the kept readings are dropped and read again: the same events
    import aftertrace.ingest.formats.logs.engine as engine
    import aftertrace.ingest.lines as lines_mod
    path = NCCL / "bigscience__n16_32gb_all_reduce_bench.txt.gz"
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 16 * 1024)     # (chunks that meet new messages)
    real = engine._info_read
    runs = []
    for bound in (engine.MAX_INFO_READ, 5):
        reads: list[str] = []
        monkeypatch.setattr(engine, "_info_read", lambda msgs, reads=reads: reads.extend(msgs) or real(msgs))
        monkeypatch.setattr(engine, "MAX_INFO_READ", bound)
        runs.append((events(parse(path, tmp_path / str(bound))), reads))
    (want, once), (got, again) = runs
    assert got == want and any(e["name"] == "nccl_comm_init" for e in got)
    assert len(once) == len(set(once)) > 5 and len(again) > len(once)   # (once each; then read again)


def test_a_run_in_header_takes_the_host_its_pid_had_first_on_a_clean_line(tmp_path):
    # A header run into other output ("...0host:pid:tid") does not say where its host begins: the
    # line takes the host its pid had on a clean line, the first such line when the pid was seen
    # under two hosts (pids recur across hosts), whatever order Polars' unique() would give.
    lines = []
    for p in range(40):
        lines.append(f"node{p}a:{1000 + p}:{1000 + p} [0] NCCL INFO cudaDriverVersion 12040")
    for p in range(40):
        lines.append(f"node{p}b:{1000 + p}:{1000 + p} [0] NCCL INFO cudaDriverVersion 12040")
    for p in range(40):
        lines.append(f"  1234 56.7 0node{p}a:{1000 + p}:{1000 + p} [0] NCCL WARN Call to connect returned Connection refused")
    path = tmp_path / "nccl.log"
    path.write_text("\n".join(lines) + "\n")
    for run in range(3):
        res = parse(path, tmp_path / str(run), parser="nccl_log")
        warns = [e for e in events(res) if e["name"] == "nccl_warn"]
        assert len(warns) == 40
        assert all(e["host"] == f"node{e['pid'] - 1000}a" for e in warns), \
            sorted({(e["pid"], e["host"]) for e in warns if e["host"] != f"node{e['pid'] - 1000}a"})[:5]


@pytest.mark.parametrize("chunk", [None, 8192])
def test_collapse_groups_of_thousands_of_processes_merge_over_chunks(tmp_path, monkeypatch, chunk):
    """A log of 1,500 processes (as many collapse groups as a few lines each): each process's
    topology lines (two channels over two transports) and collectives (lines with their own
    time, so that each chunk's groups are emitted with it), written in three rounds over all
    processes, are one event each with every line counted, whether the groups meet in one chunk or
    in many, merged many times on the way (a small merge threshold) and written in batches."""
    import aftertrace.ingest.formats.logs.engine as engine
    import aftertrace.ingest.lines as lines_mod
    merges = []
    if chunk:
        monkeypatch.setattr(lines_mod, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(engine._Stash, "MIN_MERGE_ROWS", 500)
        monkeypatch.setattr(engine, "COLLAPSED_BATCH", 700)     # (the events written in batches)
        merged = engine._Stash.merged
        monkeypatch.setattr(engine._Stash, "merged", lambda self: merges.append(len(self.parts)) or merged(self))
    procs = 1500
    out = []
    for rnd in range(3):
        for p in range(procs):
            h = f"host{p % 16}:{1000 + p}:{5000 + p} [0] NCCL INFO "
            via = "P2P/IPC" if rnd < 2 else "NET/Socket/0"
            out.append(h + f"Channel 0{rnd % 2}/0 : 0[0] -> 1[1] via {via}")
            out += [f"[2026-01-01 0{rnd}:{p // 60:02d}:{p % 60:02d}] " + h
                    + f"AllReduce: opCount {rnd * 2 + k:x} sendbuff 0x7f recvbuff 0x7f count 1 datatype 7 op 0 "
                      f"root 0 comm 0x{p:x} [nranks=2] stream 0x9" for k in range(2)]
    path = tmp_path / "nccl.log"
    path.write_text("\n".join(out) + "\n")
    res = parse(path, tmp_path)
    assert res.status == "parsed"
    ev = events(res)
    topo = {e["pid"]: e for e in ev if e["name"] == "nccl_topology"}
    coll = {e["pid"]: e for e in ev if e["name"] == "nccl_coll"}
    assert len(ev) == len(topo) + len(coll) and sorted(topo) == sorted(coll) == list(range(1000, 1000 + procs))
    for p in (1000, 1000 + procs // 2, 999 + procs):
        t, c = topo[p]["attrs"], coll[p]["attrs"]
        i = p - 1000
        assert (t["lines"], t["first_line"], t["last_line"], t["transports"], t["channels"]) == (
            3, 3 * i + 1, 6 * procs + 3 * i + 1, ["NET/Socket/0", "P2P/IPC"], 2)
        assert (c["lines"], c["first_line"], c["last_line"], c["op_count"], c["first_ts_ns"]) == (
            6, 3 * i + 2, 6 * procs + 3 * i + 3, "5", 1767225600 * 10**9 + i * 10**9)
        assert topo[p]["host"] == coll[p]["host"] == f"host{i % 16}"
    assert res.attrs["nccl_coll_lines"] == 6 * procs
    assert res.attrs["line_families"]["nccl"] == 9 * procs
    if chunk:
        assert len(merges) > 5 and max(merges) > 2     # (merged on the way, and at the end)
