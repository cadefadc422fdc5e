"""Where a stopped rank waited (analysis/stacks.py): the module's worked example on the recorded
DataLoader deadlock (sample_traces/hang-dataloader-lock), and the reading of one stack."""
from __future__ import annotations

from pathlib import Path

import pytest

from aftertrace.analysis import stacks, timeline
from aftertrace.server.service import Service
from aftertrace.server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "hang-dataloader-lock"


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    svc = Service(Settings.from_env(home=tmp_path_factory.mktemp("stacks") / "home"))
    iid = svc.submit_path(SAMPLE).incident_id
    return svc, iid, svc.analyze(iid)


def test_positions_of_the_worked_example(analysed):
    svc, iid, _ = analysed
    pos = stacks.positions(svc.store, iid)
    rank1, rank0 = pos[("", 12580)], pos[("", 12579)]
    assert rank1.waits_for == "dataloader" and not rank1.worker
    assert rank0.waits_for == "collective" and rank0.words() == \
        "waited in _engine_run_backward (torch/autograd/graph.py:979)"
    for w in (12677, 12678):        # rank 1's workers: inside the dataset, in a futex wait
        p = pos[("", w)]
        assert (p.worker, p.waits_for, p.where, p.idle) == (True, None, "Shards.__getitem__ (hang_job.py:37)", True)
        assert p.syscall == "futex() (a lock or condition wait)"
        assert p.syscall_ev.source == f"vm/strace/strace-{w}.txt" and p.syscall_ev.line == 1
    for w in (12668, 12669):        # rank 0's: idle in their loop, waiting for work
        assert (pos[("", w)].worker, pos[("", w)].waits_for) == (True, "work")


def test_the_stall_names_where_the_rank_was_stuck(analysed):
    _, _, rep = analysed
    first = rep["chains"][0]["links"][0]
    assert (first["kind"], first["rank"], first["pid"]) == ("rank_stalled", 1, 12580)
    assert first["summary"].endswith(
        "its main thread waited for its DataLoader workers (Queue.get in _MultiProcessingDataLoaderIter); its "
        "workers (pids 12677, 12678) were inside Shards.__getitem__ (hang_job.py:37), waiting in futex() (a lock "
        "or condition wait) (py-spy and strace)")
    sources = [e["source"] for e in first["evidence"]]
    assert sources[:2] == ["vm/logs/torchrun.log", "vm/stacks/py-spy-12580.txt"]
    assert "vm/stacks/py-spy-12677.txt" in sources and "vm/strace/strace-12677.txt" in sources
    assert "its DataLoader workers blocked inside Shards.__getitem__ (hang_job.py:37)" in rep["summary"]


@pytest.mark.parametrize("frames, want", [
    # a worker idle in its loop (py-spy 0.3+: Class.method; short file names)
    (["_PollLikeSelector.select (selectors.py:415)", "Queue.get (multiprocessing/queues.py:113)",
      "_worker_loop (torch/utils/data/_utils/worker.py:334)"], ("work", None, True)),
    # the same with an older py-spy's bare names and absolute paths
    (["select (/usr/lib/python3.8/selectors.py:415)", "get (/usr/lib/python3.8/multiprocessing/queues.py:107)",
      "_worker_loop (/opt/venv/lib/python3.8/site-packages/torch/utils/data/_utils/worker.py:302)"],
     ("work", None, True)),
    # a worker inside user code that itself waits on a queue is not idle
    (["Queue.get (multiprocessing/queues.py:113)", "load (data.py:12)",
      "_worker_loop (torch/utils/data/_utils/worker.py:374)"], (None, "load (data.py:12)", True)),
    (["wait (threading.py:295)", "result (_base.py:427)", "_snapshot (main.py:278)"],
     (None, "result (_base.py:427)", False)),
    # py-spy --native (tests/data/stacks/py-spy-native.txt): C frames are the runtime's, not user code
    (["0x7f11dfea3f16 (libc.so.6)", "PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
      "lock_PyThread_acquire_lock (libpython3.11.so.1.0)", "load_shard (sleeper.py:7)", "<module> (sleeper.py:11)"],
     (None, "load_shard (sleeper.py:7)", False)),
])
def test_classify(frames, want):
    assert stacks._classify(frames) == want


def test_a_bundle_taken_while_the_job_hung(tmp_path):
    """``aftertrace collect --hang-after 8s`` around the same job (sample_traces/
    collected-hang-dataloader-lock): no failure yet, no timeout, both ranks silent; the dumps
    alone say which rank holds the other up, and the hang watchdog is the end."""
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(ROOT / "sample_traces" / "collected-hang-dataloader-lock").incident_id)
    assert rep["failure"]["kind"] == "job_hang"
    (chain, *_) = rep["chains"]
    assert [l["kind"] for l in chain["links"]] == ["rank_stalled", "job_hang"]
    first = chain["links"][0]
    assert (first["rank"], first["pid"], first["host"]) == (1, 17730, "vm")
    assert "when the stacks were dumped, rank 0 waited in a collective (_engine_run_backward " in first["summary"]
    assert "its workers (pids 17889, 17890) were inside Shards.__getitem__ (hang_job.py:37)" in first["summary"]
    assert rep["summary"].startswith("It started with rank 1 (pid 17730) stopping (no progress after that; its "
                                     "DataLoader workers blocked inside Shards.__getitem__ (hang_job.py:37))")
    assert "The job was found hanging at 16:51:06.297 UTC" in rep["summary"]
    # when the stacks were dumped: the collector's capture of vm/stacks/ (a dump carries no time)
    (r1,) = [p for p in rep["progress"] if p["rank"] == 1]
    assert r1["stack"]["taken_time"] == "2026-12-07T16:51:12.307388Z"
    assert {w["taken_time"] for w in r1["stack"]["workers"]} == {"2026-12-07T16:51:12.307388Z"}
    # and on the timeline there: each dump's records at its capture (py-spy's, the kernel's stacks
    # and wait channels, the df of /dev/shm), on a track of its file named by its pid
    iid = rep["incident"]["id"]
    placed = {(r["format"], r["ts"]) for r in svc.store.query(
        """SELECT s.format, fmt_ts AS ts FROM (SELECT e.*, strftime(make_timestamp(e.ts_utc_ns // 1000),
                  '%H:%M:%S.%f') AS fmt_ts FROM events e) e JOIN sources s USING (incident_id, source_id)
           WHERE e.incident_id = ? AND s.kind IN ('stack_dump', 'host_info') AND e.category IN ('stack', 'filesystem')""",
        [iid])}
    assert placed == {("py_spy_dump", "16:51:12.307388"), ("proc_stack", "16:51:12.456908"),
                      ("proc_wchan", "16:51:12.456908"), ("df", "16:51:15.497576")}
    labels = {t["label"] for t in timeline.tracks(svc.store, iid)}
    assert {"py-spy-17730.txt", "stack · pid 17730", "wchan · pid 17889", "df-dev-shm.txt"} <= labels
    # with the report, whose process each is (the launcher's is no rank's)
    labels = {t["label"] for t in timeline.tracks(svc.store, iid, rep)}
    assert {"py-spy-17730.txt · rank 1", "stack · pid 17730 · rank 1", "wchan · pid 17889 · rank 1's worker",
            "py-spy-17880.txt · rank 0's worker", "py-spy-17682.txt", "df-dev-shm.txt"} <= labels


def test_a_collected_bundle_beside_other_folders_keeps_its_capture_times(tmp_path):
    """The same bundle one folder down, beside another (node bundles side by side, a note): its
    manifest names its captures from its own folder, not the upload's."""
    import shutil
    up = tmp_path / "upload"
    shutil.copytree(ROOT / "sample_traces" / "collected-hang-dataloader-lock", up / "bundle-a")
    (up / "notes").mkdir()
    (up / "notes" / "README.txt").write_text("the job hung overnight\n")
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(up).incident_id)
    assert {p["stack"]["taken_time"] for p in rep["progress"]} == {"2026-12-07T16:51:12.307388Z"}
    (n,) = svc.store.query("""SELECT count(*) AS n FROM events e JOIN sources s USING (incident_id, source_id)
                              WHERE e.incident_id = ? AND starts_with(s.path, 'bundle-a/vm/stacks/')
                                AND e.ts_utc_ns IS NULL""", [rep["incident"]["id"]])
    assert n["n"] == 0


def test_a_full_dev_shm_is_said_next_to_blocked_workers(tmp_path):
    """The recorded deadlock with a real ``df -B1 /dev/shm`` of a full 64 MiB /dev/shm added (two
    real recordings put together: this tests the telling, it is not an incident)."""
    import shutil
    b = tmp_path / "bundle"
    shutil.copytree(SAMPLE, b)
    (b / "vm" / "host").mkdir()
    shutil.copyfile(ROOT / "tests" / "data" / "df" / "df-B1.txt", b / "vm" / "host" / "df-dev-shm.txt")
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(b).incident_id)
    first = rep["chains"][0]["links"][0]
    assert first["summary"].endswith("waiting in futex() (a lock or condition wait); /dev/shm was full "
                                     "(64 MiB of 64 MiB, df) (py-spy and strace)")
    assert "vm/host/df-dev-shm.txt" in [e["source"] for e in first["evidence"]]
    assert "/dev/shm full (64 MiB of 64 MiB)" in rep["summary"]


def test_a_rank_blocked_in_a_read_that_never_returns(tmp_path):
    """``collected-hang-fifo`` (recorded after this module was written, analysed before any change
    for it): rank 1's main thread opens a FIFO nobody writes; no DataLoader is involved."""
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(ROOT / "sample_traces" / "collected-hang-fifo").incident_id)
    first = rep["chains"][0]["links"][0]
    assert (first["kind"], first["rank"], first["pid"]) == ("rank_stalled", 1, 29990)
    assert first["summary"].endswith("its main thread was blocked in main (hang_job.py:87), waiting in openat() of "
                                     "/tmp/aftertrace-shard.fifo (py-spy and strace)")
    (r1,) = [p for p in rep["progress"] if p["rank"] == 1]
    assert r1["stack"]["elsewhere"] is True and r1["stack"]["workers"] == []


def test_native_stacks_alone_follow_the_wait_to_the_workers(tmp_path):
    """``hang-gdb-dataloader-lock``: the same deadlock, its stacks taken with ``gdb -batch -ex "thread
    apply all bt"`` (no py-spy, no Python frames): the rank's main thread waits in poll() inside the
    interpreter, its children are DataLoader workers (torch names them ``pt_data_worker``), two of
    which wait to acquire a Python lock."""
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    iid = svc.submit_path(ROOT / "sample_traces" / "hang-gdb-dataloader-lock").incident_id
    rep = svc.analyze(iid)
    first = rep["chains"][0]["links"][0]
    assert (first["kind"], first["rank"], first["pid"]) == ("rank_stalled", 1, 16138)
    assert first["summary"].endswith(
        "its main thread waited for its DataLoader workers (in poll(), its workers alive); its workers (pids 16190, "
        "16191) were inside a Python lock's acquire() (threading.Lock) (lock_PyThread_acquire_lock), waiting in "
        "futex() (a lock or condition wait) (gdb)")
    assert [e["source"] for e in first["evidence"]][1:] == [
        "vm/stacks/gdb-16138.txt", "vm/stacks/gdb-16190.txt", "vm/stacks/gdb-16191.txt"]
    pos = stacks.positions(svc.store, iid)
    rank0 = pos[("", 16137)]
    assert (rank0.tool, rank0.waits_for) == ("gdb", "collective")
    assert rank0.words() == ("waited in c10d::Reducer::finalize_backward() "
                             "(/opt/torchenv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so)")
    assert [(pos[("", w)].worker, pos[("", w)].waits_for, pos[("", w)].syscall) for w in (16182, 16183)] == \
        [(True, "work", "poll()")] * 2          # rank 0's workers: idle, waiting for their index queue


def test_a_native_stack_names_the_file_an_open_waits_for(tmp_path):
    svc = Service(Settings.from_env(home=tmp_path / "home"))
    rep = svc.analyze(svc.submit_path(ROOT / "sample_traces" / "hang-gdb-fifo").incident_id)
    first = rep["chains"][0]["links"][0]
    assert (first["kind"], first["rank"], first["pid"]) == ("rank_stalled", 1, 15873)
    assert first["summary"].endswith("its main thread was blocked in open() of a file (io.FileIO) "
                                     "(_io_FileIO___init___impl), waiting in open() of /tmp/aftertrace-shard.fifo (gdb)")


@pytest.mark.parametrize("frames, thread, call, want", [
    (["__futex_abstimed_wait_common64 (./nptl/futex-internal.c:57)",
      "std::condition_variable::wait(std::unique_lock<std::mutex>&) (/lib/x86_64-linux-gnu/libstdc++.so.6)",
      "c10d::Reducer::finalize_backward() (/x/libtorch_cpu.so)"], "python3", "futex() (a lock or condition wait)",
     ("collective", None, False)),
    # an idle worker: only the runtime on its stack, waiting for its index queue
    (["__GI___poll (../sysdeps/unix/sysv/linux/poll.c:29)",
      "select_poll_poll_impl (/tmp/python-build.1/Python-3.11.7/Modules/selectmodule.c:654)",
      "_PyEval_EvalFrameDefault (Python/ceval.c:5325)"], "pt_data_worker", "poll()", ("work", None, True)),
    # the same worker in a user's own library: where it was
    (["__GI___poll (../sysdeps/unix/sysv/linux/poll.c:29)", "fetch_remote (/opt/app/libfetch.so)"],
     "pt_data_worker", "poll()", (None, "fetch_remote (/opt/app/libfetch.so)", True)),
    (["0x00007f in ?? (/lib64/libcuda.so.1)"], "python3", None, (None, "0x00007f in ?? (/lib64/libcuda.so.1)", False)),
])
def test_classify_native(frames, thread, call, want):
    assert stacks._classify_native(frames, thread, call) == want
